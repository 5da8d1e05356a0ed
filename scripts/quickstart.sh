#!/usr/bin/env bash
# The main job: install, build, bring up a real local Slurm cluster with the train-runtime plugin,
# and run steps through `srun --train-runtime`. Run as root. Leaves the cluster running; stop it
# with `bash slurm_examples/local-cluster/cluster.sh stop`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
cluster=slurm_examples/local-cluster/cluster.sh
shared=$(cd .. && pwd)/shared/topologies
turin=$shared/hwloc-lenovo-sd665nv3-turin-4xH200-4xCX7.xml

if [[ -f $turin ]]; then
  echo
  echo "== A node described by a real 4x H200 server (Lenovo SD665-N V3): 4 ranks, one per GPU"
  bash "$cluster" start --mode xml --xml "$turin"
  eval "$(bash "$cluster" env)"
  srun -n 4 -c 32 --gpus-per-task=1 --train-runtime=show bash -c \
    'echo "rank $RANK/$WORLD_SIZE  GPU $TRAINRT_GPU_BUSIDS (CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES)  NCCL_IB_HCA=$NCCL_IB_HCA  cpus $TRAINRT_CPUS  mem NUMA $TRAINRT_MEMS  OMP_NUM_THREADS=$OMP_NUM_THREADS  $MASTER_ADDR:$MASTER_PORT"' \
    | sort -k2 -n
fi

echo
echo "== This machine (live hwloc, no GPUs): 2 ranks really bound, policy numa"
bash "$cluster" start --mode live
eval "$(bash "$cluster" env)"
srun -n 2 --train-runtime=policy=numa,show bash -c \
  'echo "rank $RANK/$WORLD_SIZE  cpus $TRAINRT_CPUS (Cpus_allowed_list $(grep Cpus_allowed_list /proc/self/status | cut -f2))  $MASTER_ADDR:$MASTER_PORT"' | sort -k2 -n
echo
echo "The cluster is still up: eval \"\$(bash $cluster env)\"; srun --train-runtime=help true"
