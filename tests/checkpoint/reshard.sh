#!/usr/bin/env bash
# Sharded state across world sizes: save at 4 (steps 1 and 2), restore at 1, 3, 4 with another
# split, 4 as saved, 6 and 8, each rank checking every byte; then overlapping chunks at save.
# Then the same state re-saved by 3 ranks exports (trainrt-ckpt export) byte for byte as the
# 4-rank step does.
# Usage: reshard.sh MPIRUN RESHARD_MP TRAINRT_CKPT
set -uo pipefail
mpirun=$1 prog=$2 tool=$3
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
fail=0
run() { "$mpirun" --allow-run-as-root --oversubscribe -np "$@"; }
check() {  # check NAME EXPECTED_COUNT OUTPUT
  local name=$1 want=$2 out=$3 got
  got=$(grep -c "^CONTENT ok" <<<"$out")
  # Sharded state's restore ends with its content checked against the manifest's fingerprints.
  if [[ $got -eq $want ]] && ! grep -q "^RESTORED -1\|ERROR" <<<"$out" && [[ $(grep -c "^RESTORED 2" <<<"$out") -eq $want ]] &&
    [[ $(grep -c "^PHASES find,check,read,fingerprint,install$" <<<"$out") -eq $want ]]; then
    echo "PASS $name: $got ranks restored step 2, every byte as saved, its fingerprints checked"
  else
    echo "FAIL $name: $got of $want ranks ok"; echo "$out" | tail -20; fail=1
  fi
}
for s in 1 2; do out=$(run 4 "$prog" save "$d/ckpt" $s 2>&1) || { echo "FAIL save $s: $out"; exit 1; }; done
for n in 1 3 6 8; do check "4 -> $n ranks" "$n" "$(run "$n" "$prog" restore "$d/ckpt" 2>&1)"; done
check "4 -> 4 ranks, the same layout" 4 "$(run 4 "$prog" restore "$d/ckpt" 2>&1)"
check "4 -> 4 ranks, another split" 4 "$(run 4 "$prog" restore "$d/ckpt" alt 2>&1)"
out=$(run 3 "$prog" resave "$d/ckpt" 5 alt 2>&1)
if grep -q "^SAVED 5" <<<"$out"; then
  same=1
  for t in a b c d; do
    "$tool" export "$d/ckpt" --tensor $t --step 2 -o "$d/$t.2.npy" >/dev/null 2>&1 && "$tool" export "$d/ckpt" --tensor $t --step 5 -o "$d/$t.5.npy" >/dev/null 2>&1 &&
      cmp -s "$d/$t.2.npy" "$d/$t.5.npy" || same=0
  done
  if ((same)); then echo "PASS re-saved at 3 ranks: every tensor exports byte for byte as the 4-rank step"
  else echo "FAIL exports of step 2 (4 ranks) and 5 (3 ranks) differ"; fail=1; fi
else
  echo "FAIL resave at 3 ranks:"; echo "$out" | tail; fail=1
fi
out=$(run 3 "$prog" overlap "$d/overlap" 2>&1)
if [[ $(grep -c "^USAGE-ERROR .*tensor 'a'.*ranks 0 and 1 both hold" <<<"$out") -eq 3 ]] && [[ ! -e $d/overlap/step_000000000001 ]]; then
  echo "PASS overlapping chunks: every rank refused the save, naming 'a' and ranks 0 and 1; nothing written"
else
  echo "FAIL overlapping chunks:"; echo "$out" | tail; ls -R "$d/overlap"; fail=1
fi
exit $fail
