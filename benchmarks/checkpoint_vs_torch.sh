#!/usr/bin/env bash
# Our checkpoints next to PyTorch's on the same state and filesystem, 2 ranks each, alternating
# (ours, torch, ours, torch; ROUNDS rounds), medians over rounds. Prints the ratios the checkpoint
# issue asks for. Benchmark only: torch stays out of CI.
#
#   benchmarks/checkpoint_vs_torch.sh [DIR=/var/tmp/ckb] [ROUNDS=2] [MiB ...=256 1024]
#
# TORCH_PYTHON: a python with torch >= 2.4 (DCP async_save); default /var/tmp/torchvenv/bin/python,
# made by: python3 -m venv /var/tmp/torchvenv && /var/tmp/torchvenv/bin/pip install torch numpy
#
#   benchmarks/checkpoint_vs_torch.sh --device [DIR=/tmp] [MiB ...=1024 8192]
#
# Device mode (one GPU): benchmarks/ckpt-device-bench (save() stall vs one cudaMemcpy D2H
# into pinned memory; restore() vs read + cudaMemcpy H2D; bytes checked), then
# benchmarks/ckpt_torch.py --device cuda (DCP async_save of the same tensors, one-rank gloo group),
# then the blocking ratios. CKPT_DEVICE_BENCH: the bench binary (default build/benchmarks/...);
# TORCH_PYTHON: default python3 (CKPT_TORCH_DEVICE=cpu: a logic check of the script without a GPU). Exit 77 when there is no CUDA device, 1 when either side fails.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
if [ "${1:-}" = --device ]; then
  shift
  dir=${1:-/tmp}
  shift $(($# < 1 ? $# : 1))
  sizes=("$@")
  [ ${#sizes[@]} -gt 0 ] || sizes=(1024 8192)
  bench=${CKPT_DEVICE_BENCH:-$repo/build/benchmarks/ckpt-device-bench}
  py=${TORCH_PYTHON:-python3}
  [ -x "$bench" ] || { echo "checkpoint_vs_torch: $bench missing (set CKPT_DEVICE_BENCH)" >&2; exit 2; }
  log=$(mktemp)
  trap 'rm -f "$log"' EXIT
  rc=0
  "$bench" --dir "$dir" --sizes "$(IFS=,; echo "${sizes[*]}")" | tee "$log" || rc=$?
  [ $rc -eq 0 ] || { echo "checkpoint_vs_torch: ckpt-device-bench exited $rc" >&2; exit $rc; }
  # The bench's build may put a CUDA prefix on LD_LIBRARY_PATH; torch brings its own libraries.
  env -u LD_LIBRARY_PATH PYTHONUNBUFFERED=1 "$py" "$repo/benchmarks/ckpt_torch.py" --device "${CKPT_TORCH_DEVICE:-cuda}" --dir "$dir" "${sizes[@]}" |
    tee -a "$log" || rc=$?
  [ $rc -eq 0 ] || { echo "checkpoint_vs_torch: ckpt_torch.py --device cuda exited $rc" >&2; exit $rc; }
  "$py" - "$log" <<'PY'
import re, sys
ours, torch = {}, {}
for line in open(sys.argv[1]):
    m = re.match(r"#(device-figures|torch-device) (.*)", line)
    if m:
        kv = dict(x.split("=") for x in m.group(2).split())
        if m.group(1) == "device-figures":
            ours[int(kv["mib"])] = kv
        else:
            torch[(int(kv["mib"]), kv["variant"])] = kv
print("# ratios, same tensors, same run; > 1 favours train-runtime")
for mib in sorted(ours):
    st = float(ours[mib]["stall_ms"])
    for variant in ("default", "pinned", "async"):
        t = torch.get((mib, variant))
        if not t:
            print(f"{mib:>5} MiB  dcp.async_save [{variant}]: not measured")
            continue
        blk, ready = float(t["block_ms"]), float(t["ready_ms"])
        goal = " (goal >= 3x)" if variant == "default" else ""
        print(f"{mib:>5} MiB  blocked: save() {st:.2f} ms | dcp.async_save [{variant:7}] returns after {blk:.2f} ms -> "
              f"{blk / st:.2f}x less{goal}; tensors safe to modify after {ready:.2f} ms -> {ready / st:.2f}x")
for mib in sorted({m for m, _ in torch} - ours.keys()):
    print(f"{mib:>5} MiB  save() not measured: no ratio")
PY
  exit 0
fi
dir=${1:-/var/tmp/ckb} rounds=${2:-2}
shift $(($# < 2 ? $# : 2))
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(256 1024)
py=${TORCH_PYTHON:-/var/tmp/torchvenv/bin/python}
bench=$repo/build/benchmarks/ckpt-bench
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
