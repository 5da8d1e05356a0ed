#!/usr/bin/env bash
# What checkpointing costs the trainer: the same 2-rank run with a checkpoint every K steps and
# with none, alternating (A B A B), under mpirun. Prints mean step time and goodput of each.
# Usage: benchmarks/goodput.sh [STEPS=1000] [K=50] [PAIRS=3] [HIDDEN=2048]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
steps=${1:-1000} k=${2:-50} pairs=${3:-3} hidden=${4:-2048}
trainer=$repo/build/slurm_examples/trainer/train-mlp
work=$(mktemp -d /var/tmp/trainrt-goodput.XXXX)
trap 'rm -rf "$work"' EXIT
one() {  # one EVERY -> "mean_step_ms goodput"
  local d=$work/run-$1-$RANDOM
  mpirun --allow-run-as-root --oversubscribe -np 2 "$trainer" --steps "$steps" --ckpt-every "$1" --hidden "$hidden" \
    --ckpt-dir "$d/c" --out "$d/o" >/dev/null 2>&1
  python3 - "$d/o/metrics_rank0.jsonl" "$d/o/goodput.json" <<'PY'
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"step"' in l and '"event":"step"' in l]
g = json.load(open(sys.argv[2]))
print(f"{1000 * sum(s['step_s'] + s['ckpt_stall_s'] for s in steps) / len(steps):.4f} {g['goodput']:.4f}")
PY
}
printf '%-10s %14s %9s\n' run "step+stall ms" goodput
with=() without=()
for ((i = 0; i < pairs; i++)); do
  a=$(one "$k"); b=$(one 0)
  printf '%-10s %14s %9s\n' "K=$k" ${a} ; printf '%-10s %14s %9s\n' "none" ${b}
  with+=("${a%% *}"); without+=("${b%% *}")
done
python3 - "${with[*]}" "${without[*]}" "$k" <<'PY'
import statistics, sys
w = [float(x) for x in sys.argv[1].split()]; n = [float(x) for x in sys.argv[2].split()]
mw, mn = statistics.median(w), statistics.median(n)
print(f"median step time with checkpoints every {sys.argv[3]} steps: {mw:.4f} ms, without: {mn:.4f} ms, cost {100 * (mw - mn) / mn:+.2f}% (goal < 5%)")
PY
