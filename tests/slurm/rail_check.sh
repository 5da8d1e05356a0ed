#!/usr/bin/env bash
# The cross-node rail check on a real 2-node local Slurm cluster (docs/topology.md):
# `srun --mpi=pmix -N 2 trainrt-topo --check` gathers every node's rail layout over PMIx and names
# the node that differs. Each node is given its topology file by its Slurm node name: the same real
# JUWELS Booster file on both agrees (exit 0); the other JUWELS box, whose HDR NICs are named in
# another order, on trt-n2 is named (exit 1). Also: both nodes live, several tasks per node, and
# without a PMIx server (refused, never a silent pass). Then, on one node claiming the turin server,
# the NCCL_TOPO_FILE that the digested cache carries (plugstack topology_cache=, nccl_topo=always).
# Usage: rail_check.sh BUILD_DIR SHARED_TOPOLOGIES_DIR. Exit 77 (skipped) when not root or without
# the JUWELS files.
set -uo pipefail
build=$(cd "$1" && pwd)
shared=${2:-}
repo=$(cd "$(dirname "$0")/../.." && pwd)
cluster=$repo/slurm_examples/local-cluster/cluster.sh
topo=$build/topology/trainrt-topo
a=$shared/hwloc-jsc-juwels-booster-jwb0001-4xA100-4xHDR.xml
b=$shared/hwloc-jsc-juwels-booster-jwb0004-4xA100-4xHDR.xml
if [[ $(id -u) -ne 0 ]]; then echo "SKIPPED: the local Slurm cluster needs root"; exit 77; fi
if [[ ! -f $a || ! -f $b ]]; then echo "SKIPPED: '$shared' lacks the JUWELS Booster files"; exit 77; fi
[[ -x $topo ]] || { echo "FAIL: $topo is not built"; exit 1; }

source "$repo/tests/slurm/harness.sh"
cluster_harness railcheck 7967 7968
bash "$cluster" start --mode live --nodes 2 >/dev/null 2>"$work/start.log" || { cat "$work/start.log"; exit 1; }
crun() { timeout 120 bash "$cluster" run "$@"; }
# Each node reads the topology file named after it (links to the shared files, never copies).
mkdir -p "$work/topo"
per_node="exec $topo --check --xml $work/topo/\$SLURMD_NODENAME.xml"

ln -sf "$a" "$work/topo/trt-n1.xml"; ln -sf "$a" "$work/topo/trt-n2.xml"
out=$(crun srun -N 2 --ntasks-per-node=1 --mpi=pmix bash -c "$per_node" 2>&1); rc=$?
if [[ $rc -eq 0 && $out == *"rail check: 2 node(s), 1 layout(s)"* && $out == *"majority 2 node(s): trt-n1,trt-n2"* ]]; then
  pass "the same topology on both nodes: one layout, exit 0"
else fail "same topology (rc=$rc)" "$out"; fi

ln -sf "$b" "$work/topo/trt-n2.xml"
out=$(crun srun -N 2 --ntasks-per-node=1 --mpi=pmix bash -c "$per_node" 2>&1); rc=$?
if [[ $rc -eq 1 && $out == *"DIFFERS  1 node(s): trt-n2"* && $out == *"majority 1 node(s): trt-n1"* &&
      $(grep -c "^rail check:" <<<"$out") -eq 1 ]]; then
  pass "trt-n2 given the other JUWELS box: trt-n2 named, exit 1, one report (rank 0's)"
else fail "mismatch (rc=$rc)" "$out"; fi

out=$(crun srun -N 2 --ntasks-per-node=2 --mpi=pmix bash -c "$per_node" 2>&1); rc=$?
if [[ $rc -eq 1 && $out == *"rail check: 2 node(s), 2 layout(s)"* && $out == *"DIFFERS  1 node(s): trt-n2"* ]]; then
  pass "two tasks per node: each node counted once, trt-n2 named"
else fail "two tasks per node (rc=$rc)" "$out"; fi

out=$(crun srun -N 2 --ntasks-per-node=1 --mpi=pmix "$topo" --check 2>&1); rc=$?
if [[ $rc -eq 0 && $out == *"2 node(s), 1 layout(s)"* ]]; then
  pass "both nodes live (this machine, sysfs extras): one layout"
else fail "live (rc=$rc)" "$out"; fi

out=$(crun srun -N 2 --ntasks-per-node=1 --mpi=none bash -c "$per_node" 2>&1); rc=$?
if [[ $rc -eq 2 && $out == *"no PMIx server"* && $out != *"rail check:"* ]]; then
  pass "without --mpi=pmix: refused (exit 2), never a one-node pass"
else fail "no PMIx (rc=$rc)" "$out"; fi

# ------------------------------------------- the digested cache's NCCL_TOPO_FILE (same issue)
# One node claiming the turin server, its cache and NCCL file at a private path (plugstack
# topology_cache=), nccl_topo=always: the file is exported, a user's own is kept, an edited one is not.
# The cache names its source by path, and cluster.sh hands the plugin the file's canonical path.
turin=$(realpath -e "$shared/hwloc-lenovo-sd665nv3-turin-4xH200-4xCX7.xml" 2>/dev/null)
if [[ -n $turin ]]; then
  bash "$cluster" stop >/dev/null 2>&1
  mkdir -m 755 "$work/c"
  cache=$work/c/topology.cache
  "$topo" --xml "$turin" --write-cache "$cache" >/dev/null
  bash "$cluster" start --mode xml --xml "$turin" --plugin-args "topology_cache=$cache nccl_topo=always" \
    >/dev/null 2>"$work/start-xml.log" || { cat "$work/start-xml.log"; exit 1; }
  show='echo "T=${NCCL_TOPO_FILE:-}"'
  out=$(crun srun -n 1 --gpus-per-task=1 --train-runtime bash -c "$show" 2>&1)
  if [[ $out == *"T=$work/c/topology.nccl.xml"* ]]; then pass "nccl_topo=always: NCCL_TOPO_FILE is the file beside the cache"
  else fail "NCCL_TOPO_FILE exported" "$out"; fi
  out=$(NCCL_TOPO_FILE=/home/me/topo.xml crun srun -n 1 --gpus-per-task=1 --train-runtime=env=override bash -c "$show" 2>&1)
  if [[ $out == *"T=/home/me/topo.xml"* ]]; then pass "a user's own NCCL_TOPO_FILE is kept, even with env=override"
  else fail "user's NCCL_TOPO_FILE kept" "$out"; fi
  echo "<!-- edited -->" >> "$work/c/topology.nccl.xml"
  out=$(crun srun -n 1 --gpus-per-task=1 --train-runtime=show bash -c "$show" 2>&1)
  if [[ $out == *"T="$'\n'* || $out == *"T=" ]] && [[ $out == *"no NCCL_TOPO_FILE"*"stale"* ]]; then
    pass "an edited NCCL file is not exported, and show says why"
  else fail "edited NCCL file" "$out"; fi
fi

echo "rail_check: $passed passed, $failed failed"
exit $((failed > 0))
