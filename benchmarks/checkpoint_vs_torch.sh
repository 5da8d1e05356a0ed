#!/usr/bin/env bash
# Our checkpoints next to PyTorch's on the same state and filesystem, 2 ranks each, alternating
# (ours, torch, ours, torch; ROUNDS rounds), medians over rounds. Prints the ratios the checkpoint
# issue asks for. Benchmark only: torch stays out of CI.
#
#   benchmarks/checkpoint_vs_torch.sh [DIR=/var/tmp/ckb] [ROUNDS=2] [MiB ...=256 1024]
#
# TORCH_PYTHON: a python with torch >= 2.4 (DCP async_save); default /var/tmp/torchvenv/bin/python,
# made by: python3 -m venv /var/tmp/torchvenv && /var/tmp/torchvenv/bin/pip install torch numpy
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-/var/tmp/ckb} rounds=${2:-2}
shift $(($# < 2 ? $# : 2))
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(256 1024)
py=${TORCH_PYTHON:-/var/tmp/torchvenv/bin/python}
bench=$repo/build/tests/perf/ckpt-bench
[ -x "$bench" ] || { echo "checkpoint_vs_torch: $bench missing: run scripts/build.sh first" >&2; exit 2; }
"$py" -c 'import torch.distributed.checkpoint as d; d.async_save' 2>/dev/null ||
  { echo "checkpoint_vs_torch: $py has no torch with DCP async_save (see the header for the venv)" >&2; exit 2; }
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for ((r = 1; r <= rounds; r++)); do
  echo "## round $r/$rounds: ckpt-bench" >&2
  mpirun --allow-run-as-root --oversubscribe -np 2 "$bench" "$dir" "${sizes[@]}" | tee -a "$log" >&2
  echo "## round $r/$rounds: torch" >&2
  OMP_NUM_THREADS=1 "$py" -m torch.distributed.run --nproc_per_node 2 "$repo/benchmarks/ckpt_torch.py" "$dir" "${sizes[@]}" \
    2>/dev/null | tee -a "$log" >&2
done
python3 - "$log" <<'PY'
import re, statistics, sys
ours, torch = {}, {}
for line in open(sys.argv[1]):
    m = re.match(r"#(figures|torch) (.*)", line)
    if not m:
        continue
    kv = dict(x.split("=") for x in m.group(2).split())
    table = ours if m.group(1) == "figures" else torch
    for k, v in kv.items():
        if k != "mib":
            table.setdefault((int(kv["mib"]), k), []).append(float(v))
med = lambda t, mib, k: statistics.median(t[(mib, k)])
print("# medians over rounds; ratios > 1 favour train-runtime")
for mib in sorted({k[0] for k in ours}):
    stall, e2e = med(ours, mib, "stall_ms"), med(ours, mib, "end_to_end_ms")
    ts, ds = med(torch, mib, "torch_save_ms"), med(torch, mib, "dcp_save_ms")
    ab, at = med(torch, mib, "async_block_ms"), med(torch, mib, "async_total_ms")
    print(f"{mib:>5} MiB/rank  blocked: ours {stall:7.1f} ms | torch.save {ts:7.1f} ms -> {ts / stall:5.1f}x less (goal >= 5x)"
          f" | dcp.async_save {ab:7.1f} ms -> {ab / stall:5.1f}x less (goal > 1x)")
    print(f"{mib:>5} MiB/rank  persisted: ours {e2e:7.1f} ms | dcp.save {ds:7.1f} ms -> {ds / e2e:5.2f}x the throughput"
          f" | dcp.async_save {at:7.1f} ms -> {at / e2e:5.2f}x (goal >= 1x)")
PY
