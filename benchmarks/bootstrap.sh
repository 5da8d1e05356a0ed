#!/usr/bin/env bash
# Time to a ready world under `srun --mpi=pmix` for 2..64 local ranks: trainrt::init() (PMIx
# session + shared-memory communicator) next to a bare PMIx fence (the floor) and, when Debian's
# python3-torch is installed, torch.distributed's TCPStore + gloo rendezvous (env://, fed by the
# plugin's MASTER_ADDR/MASTER_PORT). Alternating A B C per size, REPS times; prints medians of the
# slowest rank. Run as root after `bash scripts/build.sh`. Usage: benchmarks/bootstrap.sh [REPS=5]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
reps=${1:-5}
cluster=$repo/slurm_examples/local-cluster/cluster.sh
bench=$repo/build/benchmarks/bootstrap_bench
export TRAINRT_CLUSTER_DIR=/tmp/trainrt-bench-cluster TRAINRT_SLURMCTLD_PORT=7017 TRAINRT_SLURMD_PORT=7018
export SLURM_CONF=$TRAINRT_CLUSTER_DIR/slurm.conf
trap 'bash "$cluster" stop >/dev/null 2>&1' EXIT
bash "$cluster" start --mode live >/dev/null 2>&1
torch_py=""
if /usr/bin/python3 -c 'import torch.distributed' 2>/dev/null; then
  torch_py=$(mktemp --suffix .py)
  cat > "$torch_py" <<'PY'
import time; t0 = time.perf_counter()
import os, torch, torch.distributed as dist
t1 = time.perf_counter()
dist.init_process_group("gloo", init_method="env://")
ms = torch.tensor([(time.perf_counter() - t1) * 1000.0])
dist.all_reduce(ms, op=dist.ReduceOp.MAX)
if dist.get_rank() == 0: print(f"torch {dist.get_world_size()} {ms.item():.1f}")
PY
fi
median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
printf '%6s %12s %12s %8s %14s\n' ranks "floor(ms)" "trainrt(ms)" ratio "torch-gloo(ms)"
for n in 2 4 8 16 32 64; do
  f=() t=() g=()
  for _ in $(seq 1 "$reps"); do
    f+=("$(srun -n $n -O --mpi=pmix "$bench" floor | awk '{print $3}')")
    t+=("$(srun -n $n -O --mpi=pmix "$bench" trainrt | awk '{print $3}')")
    if [[ -n $torch_py ]]; then
      g+=("$(srun -n $n -O --train-runtime=policy=none /usr/bin/python3 "$torch_py" 2>/dev/null | awk '{print $3}')")
    fi
  done
  fm=$(printf '%s\n' "${f[@]}" | median); tm=$(printf '%s\n' "${t[@]}" | median)
  gm=$([[ -n $torch_py ]] && printf '%s\n' "${g[@]}" | median || echo "n/a")
  printf '%6s %12s %12s %8.2f %14s\n' "$n" "$fm" "$tm" "$(echo "$tm / $fm" | bc -l)" "$gm"
done
[[ -n $torch_py ]] || echo "(torch column: apt-get install python3-torch to measure it)"
