#!/usr/bin/env bash
# The main job: install, build, bring up a real local Slurm cluster with the train-runtime plugin,
# show a real GPU server's placement through `srun --train-runtime=show`, then train a data-parallel
# MLP on 4 ranks over 2 nodes (network namespaces), kill one rank midway, rerun, resume from the
# last checkpoint, and report goodput. Run as root. Leaves the 2-node cluster running; stop it with
# `TRAINRT_CLUSTER_DIR=/tmp/trainrt-quickstart bash slurm_examples/local-cluster/cluster.sh stop`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
command -v gnuplot >/dev/null || { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends gnuplot-nox >/dev/null 2>&1 || echo "(gnuplot-nox not installed: no PNG plot)"; }
bash scripts/build.sh
export TRAINRT_CLUSTER_DIR=/tmp/trainrt-quickstart
export TRAINRT_BUILD_DIR=$(cd "${BUILD_DIR:-build}" && pwd)
cluster=slurm_examples/local-cluster/cluster.sh
trainer=$TRAINRT_BUILD_DIR/slurm_examples/trainer/train-mlp
turin=$(cd .. && pwd)/shared/topologies/hwloc-lenovo-sd665nv3-turin-4xH200-4xCX7.xml

if [[ -f $turin ]]; then
  echo
  echo "== 1. Placement on a node described by a real 4x H200 server (Lenovo SD665-N V3): one rank per GPU"
  bash "$cluster" start --mode xml --xml "$turin"
  bash "$cluster" run srun -n 4 -c 32 --gpus-per-node=4 --train-runtime=show bash -c \
    'echo "rank $RANK/$WORLD_SIZE  GPU $TRAINRT_GPU_BUSIDS (CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES, own at LOCAL_RANK=$LOCAL_RANK)  NCCL_IB_HCA=$NCCL_IB_HCA  cpus $TRAINRT_CPUS  mem NUMA $TRAINRT_MEMS  OMP_NUM_THREADS=$OMP_NUM_THREADS"' \
    | sort -k2 -n
fi

echo
echo "== 2. Training: 4 ranks on 2 nodes (srun --mpi=pmix --train-runtime), rank 1 killed at step 150"
bash "$cluster" start --mode live --nodes 2
run_dir=/tmp/trainrt-quickstart-run
rm -rf "$run_dir"
# bind=off: the two "nodes" share this machine's cores, so binding would pin both node leaders to
# one core, where Gloo between them can stall for seconds; the placement is still computed, shown
# and exported.
train() {
  bash "$cluster" run srun -N 2 -n 4 --mpi=pmix --kill-on-bad-exit=1 --train-runtime=policy=numa,bind=off,show \
    "$trainer" --steps 300 --ckpt-every 50 --ckpt-dir "$run_dir/ckpt" --out "$run_dir/out" --fault kill:1:150
}
if train; then echo "(the injected failure did not happen?)"; else echo ">> the step failed fast, as injected; rerunning from the last checkpoint"; fi
echo
echo "== 3. Rerun: resumes from the last committed checkpoint and finishes"
train
echo
echo "Flight recorders of the failed run: $run_dir/out/flight_rank*.json"
echo "The 2-node cluster is still up: TRAINRT_CLUSTER_DIR=$TRAINRT_CLUSTER_DIR bash $cluster run srun --train-runtime=help true"
