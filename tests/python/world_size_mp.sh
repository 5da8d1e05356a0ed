#!/usr/bin/env bash
# Per-rank state saved by 2 ranks: 1 rank raises trainrt.WorldSizeError (exit code 76 for a
# trainer, buffers untouched) instead of starting fresh; 2 ranks restore it.
# Usage: world_size_mp.sh MPIRUN PYTHON
set -uo pipefail
mpirun=$1 python=$2
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
run() { "$mpirun" --allow-run-as-root --oversubscribe -x PYTHONPATH -x PYTHONDONTWRITEBYTECODE -np "$1" "$python" \
          "$(dirname "$0")/world_size_mp.py" "$2" "$d/c" 2>&1; }
fail=0
out=$(run 2 save)
# Counted with grep -o: two ranks' lines can share one line of mpirun's output.
[[ $(grep -o 'SAVED rank [01]' <<<"$out" | sort -u | wc -l) -eq 2 ]] || { echo "FAIL save at 2 ranks: $out"; exit 1; }
out=$(run 1 restore)
if grep -q 'WORLD-SIZE-ERROR rank 0 checkpoint_error=True exit_code=76 untouched=True: .*saved by 2 ranks, this job has 1' <<<"$out"; then
  echo "PASS 1 rank: $(grep '^WORLD-SIZE-ERROR' <<<"$out")"
else echo "FAIL 1 rank: $out"; fail=1; fi
out=$(run 2 restore)
if [[ $(grep -o 'RESTORED 3 rank [01] content ok' <<<"$out" | sort -u | wc -l) -eq 2 ]]; then echo "PASS 2 ranks: step 3 restored, every value"
else echo "FAIL 2 ranks: $out"; fail=1; fi
exit $fail
