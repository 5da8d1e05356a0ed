#!/usr/bin/env bash
# The launch contract on a real local Slurm cluster: what NCCL, PyTorch and Slurm expect of a
# task's environment. Usage: launch_contract.sh BUILD_DIR SHARED_TOPOLOGIES_DIR
# Exit 77 (CTest: skipped) when not root, since the daemons must run as root.
set -uo pipefail
build=$(cd "$1" && pwd)
shared=$(cd "$2" 2>/dev/null && pwd || echo "$2")
repo=$(cd "$(dirname "$0")/../.." && pwd)
cluster=$repo/slurm_examples/local-cluster/cluster.sh
topo=$build/topology/trainrt-topo
if [[ $(id -u) -ne 0 ]]; then echo "SKIPPED: the local Slurm cluster needs root"; exit 77; fi

source "$repo/tests/slurm/harness.sh"
cluster_harness contract 7917 7918
# srun, with its "job N queued and waiting" chatter (a step can wait for the previous one to leave) dropped.
srun_q() { timeout 180 srun "$@" 2>&1 | grep -vE '^srun: job [0-9]+ (queued and waiting for resources|has been allocated resources)$'; }
task_env='env | grep -E "^(CUDA_VISIBLE_DEVICES|TRAINRT_CUDA_DEVICE|NCCL_IB_HCA|LOCAL_RANK|SLURM_STEP_GPUS)=" | sed "s/^/R$SLURM_PROCID /"'

# ---------------------------------------------------------------- real GPU servers' topologies
# Every rank of a node gets the same NCCL_IB_HCA, exactly the node's rail ports; position
# LOCAL_RANK of CUDA_VISIBLE_DEVICES is the task's own GPU, with --gpus-per-node and --gpus-per-task.
check_env() {  # check_env OUTPUT TRAINRT_TOPO_JSON MODE
  python3 - "$1" "$2" "$3" <<'PY'
import json, sys
out, want, mode = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
got = {}
for line in out.splitlines():
    if not line.startswith("R"): continue
    rank, kv = line.split(" ", 1)
    k, v = kv.split("=", 1)
    got.setdefault(int(rank[1:]), {})[k] = v
ports = [f"{n['name']}:{p['number']}" for n in sorted(want["nics"], key=lambda n: n["index"])
         if n.get("rail") is not None and n["rail"] >= 0 and n.get("name") for p in (n["ports"] or [{"number": 1}])]
efa = any(n.get("link") == "EFA" for n in want["nics"])
expect_hca = "=" + ",".join(ports) if ports and not efa else None
ok = len(got) == len(want["ranks"])
hcas = {g.get("NCCL_IB_HCA") for g in got.values()}
if hcas != {expect_hca}:
    print(f"NCCL_IB_HCA differs or is not the rail ports: {hcas} vs {expect_hca}"); ok = False
for r in want["ranks"]:
    g = got.get(r["local_rank"], {})
    visible = g.get("CUDA_VISIBLE_DEVICES", "").split(",")
    lr = int(g.get("LOCAL_RANK", "-1"))
    own = visible[lr] if 0 <= lr < len(visible) else None
    expect = g.get("SLURM_STEP_GPUS") if mode == "gpus-per-task" else str(r["gpus"][0]["index"] if isinstance(r["gpus"][0], dict) else r["gpus"][0])
    if own != expect or g.get("TRAINRT_CUDA_DEVICE") != str(lr):
        print(f"rank {lr}: CUDA_VISIBLE_DEVICES={g.get('CUDA_VISIBLE_DEVICES')} position {lr} is {own}, want {expect}; "
              f"TRAINRT_CUDA_DEVICE={g.get('TRAINRT_CUDA_DEVICE')}"); ok = False
print(f"{len(got)} ranks, NCCL_IB_HCA={expect_hca}")
sys.exit(0 if ok else 1)
PY
}

topologies=(hwloc-lenovo-sd665nv3-turin-4xH200-4xCX7.xml hwloc-jsc-juwels-booster-jwb0001-4xA100-4xHDR.xml
            hwloc-meluxina-gpu-mel2001-4xA100-2xHDR.xml hwloc-llnl-lassen-power9-4xV100-2xCX5dual.xml
            nccl-azure-ndv5-8xH100-8xNDR.xml nccl-aws-p4d-24xlarge-8xA100-4xEFA.xml)
for f in "${topologies[@]}"; do
  xml=$shared/$f
  if [[ ! -f $xml ]]; then echo "SKIPPED: $xml is absent"; continue; fi
  bash "$cluster" start --mode xml --xml "$xml" >/dev/null 2>"$work/start.log" || { fail "start on $f" "$(cat "$work/start.log")"; continue; }
  gpus=$(cat "$TRAINRT_CLUSTER_DIR/gpu-count")
  cpus=$(sed -nE 's/.* CPUs=([0-9]+) .*/\1/p' "$TRAINRT_CLUSTER_DIR/slurm.conf" | head -1)
  c=$((cpus / gpus))
  flag=--nccl-xml; [[ $f == hwloc-* ]] && flag=--xml
  want=$("$topo" $flag "$xml" --tasks "$gpus" --format json)
  for mode in gpus-per-node gpus-per-task; do
    count=$gpus; [[ $mode == gpus-per-task ]] && count=1
    out=$(srun_q -n "$gpus" -c "$c" --$mode="$count" --train-runtime bash -c "$task_env" 2>&1)
    if res=$(check_env "$out" "$want" "$mode"); then pass "$f, --$mode: one NCCL_IB_HCA of the rail ports; own GPU at LOCAL_RANK ($res)"
    else fail "$f --$mode" "$res" "$(head -20 <<<"$out")"; fi
  done
  if [[ $f == hwloc-lenovo* ]]; then
    out=$(srun_q -N 1 -n 1 -c 8 --gpus-per-node="$gpus" --train-runtime bash -c 'echo "L ${RANK:-none} ${LOCAL_RANK:-none} $TRAINRT_LAUNCHER $CUDA_VISIBLE_DEVICES $NCCL_IB_HCA"' 2>&1)
    if [[ $out == "L none none 1 0,1,2,3 =mlx5_0:1,mlx5_3:1,mlx5_4:1,mlx5_5:1" ]]; then
      pass "a launcher step (one task holding 4 GPUs): no per-rank variables, Slurm's GPUs, the node's rails"
    else fail "launcher step" "$out"; fi
    # The README's batch command as written, from the repository: the trainer is found from the
    # submit folder, runs, and the job says it finished.
    (
      cd "$repo" || exit 1
      [[ $build == "$repo/build" ]] || export TRAINER=$build/slurm_examples/trainer/train-mlp
      jobid=$(sbatch --parsable -N1 -n2 --gpus-per-node=2 slurm_examples/train.sbatch --steps 20)
      for _ in $(seq 1 1200); do squeue -h -j "$jobid" 2>/dev/null | grep -q . || break; sleep 0.1; done
      cat "train-$jobid.out" > "$work/sbatch.out" 2>&1
      rm -rf "train-$jobid.out" "run-$jobid"
    )
    if grep -q "training finished" "$work/sbatch.out"; then pass "the README's sbatch command, as written: trained and finished"
    else fail "README sbatch command" "$(tail -15 "$work/sbatch.out")"; fi
  fi
  bash "$cluster" stop >/dev/null 2>&1
done

# ---------------------------------------------------------------- Slurm binding CPUs itself
bash "$cluster" start --mode live --task-plugin affinity >/dev/null 2>"$work/start.log" || { cat "$work/start.log"; exit 1; }
agree='echo "$SLURM_PROCID $TRAINRT_CPUS $(grep Cpus_allowed_list /proc/self/status | cut -f2) $OMP_NUM_THREADS"'
for bind in cores map_cpu:1,0; do
  out=$(srun_q -n 2 --cpu-bind=$bind --train-runtime=policy=numa bash -c "$agree" 2>&1)
  # TRAINRT_CPUS is the real affinity, OMP_NUM_THREADS its whole cores (one PU per core here).
  if [[ $(wc -l <<<"$out") -eq 2 ]] && awk '$2 != $3 || $4 != 1 {bad=1} END {exit bad}' <<<"$out"; then
    pass "--cpu-bind=$bind: the plugin's CPU variables agree with the affinity Slurm and the plugin left"
  else fail "--cpu-bind=$bind" "$out"; fi
done

out=$(srun_q -n 1 --train-runtime=launcher bash -c 'echo "${RANK:-none} $(grep Cpus_allowed_list /proc/self/status | cut -f2)"' 2>&1)
plain=$(srun_q -n 1 bash -c 'grep Cpus_allowed_list /proc/self/status | cut -f2' 2>&1)
[[ $out == "none $plain" ]] && pass "launcher: the task keeps the CPUs Slurm gave it ($plain) and gets no RANK" ||
  fail "launcher (live)" "$out" "without the plugin: $plain"

out=$(srun_q -n 1 --train-runtime bash -c 'echo $TRAINRT_POLICY' 2>&1)
[[ $out == numa ]] && pass "no GPU in the step: the default policy falls back to numa" || fail "policy fallback" "$out"

out=$(OMP_NUM_THREADS=3 timeout 180 srun -n 1 --train-runtime bash -c 'echo $OMP_NUM_THREADS $TRAINRT_ENV_KEPT' 2>&1)
over=$(OMP_NUM_THREADS=3 timeout 180 srun -n 1 --train-runtime=env=override bash -c 'echo $OMP_NUM_THREADS $TRAINRT_ENV_OVERRIDDEN' 2>&1)
own=$(srun_q -n 1 --train-runtime bash -c 'echo $OMP_NUM_THREADS' 2>&1)
if [[ $out == "3 OMP_NUM_THREADS" && $over == "$own OMP_NUM_THREADS" && $own != 3 ]]; then
  pass "an exported OMP_NUM_THREADS is kept (and said); env=override replaces it"
else fail "exported tunables" "$out" "$over" "plugin's own: $own"; fi

low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range)
ports=$(for _ in 1 2 3 4 5 6; do srun_q -n 1 --train-runtime bash -c 'echo $MASTER_PORT'; done)
if [[ $(sort -u <<<"$ports" | wc -l) -eq 6 ]] && awk -v low="$low" '$1 >= low || $1 < 1024 {bad=1} END {exit bad}' <<<"$ports"; then
  pass "MASTER_PORT below the ephemeral range ($low) and distinct for 6 jobs"
else fail "MASTER_PORT" "$ports"; fi
bash "$cluster" stop >/dev/null 2>&1

# ---------------------------------------------------------------- PyTorch, the torchrun way, on 2 nodes
if /usr/bin/python3 -c 'import torch.distributed' 2>/dev/null; then
  cat > "$work/ddp.py" <<'PY'
import os, torch, torch.distributed as dist
local_rank = int(os.environ["LOCAL_RANK"])          # what torchrun-style scripts read
assert 0 <= local_rank < int(os.environ["LOCAL_WORLD_SIZE"])
assert int(os.environ["RANK"]) == int(os.environ["GROUP_RANK"]) * int(os.environ["LOCAL_WORLD_SIZE"]) + local_rank
dist.init_process_group("gloo", init_method="env://")
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
n = dist.get_world_size()
assert t.item() == n * (n + 1) / 2, t
print(f"TORCH-OK rank {dist.get_rank()} local {local_rank} of {n} via {os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}")
dist.destroy_process_group()
PY
  if bash "$cluster" start --mode live --nodes 2 >/dev/null 2>"$work/start2.log"; then
    # The nodes share this machine's hostname (network namespaces keep the UTS one), which resolves
    # to loopback: naming the data network (TRAINRT_IFNAME -> GLOO_SOCKET_IFNAME) is what lets
    # torch's Gloo reach the other node, as on clusters whose hostnames resolve to a management net.
    out=$(TRAINRT_IFNAME=eth0 timeout 180 bash "$cluster" run srun -N 2 -n 4 --train-runtime=policy=numa,bind=off /usr/bin/python3 "$work/ddp.py" 2>&1)
    if [[ $(grep -c TORCH-OK <<<"$out") -eq 4 ]]; then pass "PyTorch (Debian's) env:// init and allreduce on 2 nodes, LOCAL_RANK read the torchrun way"
    else fail "PyTorch on 2 nodes" "$(tail -15 <<<"$out")"; fi
  else fail "2-node cluster did not start" "$(cat "$work/start2.log")"; fi
  bash "$cluster" stop >/dev/null 2>&1
else
  fail "PyTorch check" "Debian's python3-torch is not importable by /usr/bin/python3 (scripts/install-deps.sh installs it)"
fi

echo "launch contract: $passed passed, $failed failed"
exit $((failed > 0))
