#!/usr/bin/env bash
# SIGKILL a checkpointing process at random points of its write and commit, TRIALS times.
# Every start must restore a complete, verified checkpoint: the previous one or the new one.
# Usage: crash_trials.sh CKPT_MP_BINARY [TRIALS=100]
set -u
bin=$1 trials=${2:-100}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
torn=0 killed=0 last=-1 regressions=0
"$bin" cycle "$dir" 1 >/dev/null || { echo "FAIL: first save"; exit 1; }
for ((t = 1; t <= trials; t++)); do
  delay=$(awk -v r=$RANDOM 'BEGIN { printf "%.3f", (r % 60) / 1000 + 0.001 }')
  out=$(timeout -s KILL "$delay" "$bin" cycle "$dir" 3 2>&1); rc=$?
  [[ $rc -eq 137 ]] && killed=$((killed + 1))
  if grep -q TORN <<<"$out"; then torn=$((torn + 1)); echo "TORN at trial $t: $out"; fi
  got=$(grep -o "RESTORED -\?[0-9]*" <<<"$out" | awk '{print $2}')
  if [[ -n $got ]]; then
    ((got < last)) && { regressions=$((regressions + 1)); echo "trial $t restored $got after $last"; }
    last=$got
  fi
done
out=$("$bin" cycle "$dir" 0 2>&1); rc=$?
final=$(grep -o "RESTORED -\?[0-9]*" <<<"$out" | awk '{print $2}')
echo "crash trials: $trials runs, $killed killed mid-flight, $torn torn, $regressions went backwards; final restore: step $final (rc $rc)"
[[ $torn -eq 0 && $regressions -eq 0 && $rc -eq 0 && $final -ge 1 && $killed -ge $((trials / 4)) ]]
