#!/usr/bin/env bash
# Integration tests against a real local Slurm cluster (munge + slurmctld + slurmd) with the
# plugin loaded. Usage: slurm_integration.sh BUILD_DIR SHARED_TOPOLOGIES_DIR
# Exit 77 (CTest: skipped) when not root, since the daemons must run as root.
set -uo pipefail
build=$(cd "$1" && pwd)
shared=$(cd "$2" 2>/dev/null && pwd || echo "$2")
repo=$(cd "$(dirname "$0")/../.." && pwd)
cluster=$repo/slurm_examples/local-cluster/cluster.sh
topo=$build/topology/trainrt-topo
if [[ $(id -u) -ne 0 ]]; then echo "SKIPPED: the local Slurm cluster needs root"; exit 77; fi

source "$repo/tests/slurm/harness.sh"
cluster_harness integration 6917 6918
task_env='env | grep -E "^(CUDA_|NCCL_IB_HCA|UCX_NET|OMP_NUM|TRAINRT_|RANK=|LOCAL_RANK|WORLD_SIZE|LOCAL_WORLD|MASTER_|GROUP_RANK)" | sort | sed "s/^/R$SLURM_PROCID /"'

# ---------------------------------------------------------------- a real GPU server's topology
ndv5=$shared/nccl-azure-ndv5-8xH100-8xNDR.xml
turin=$shared/hwloc-lenovo-sd665nv3-turin-4xH200-4xCX7.xml
if [[ -f $ndv5 ]]; then
  bash "$cluster" start --mode xml --xml "$ndv5" >/dev/null 2>"$work/start.log" || { cat "$work/start.log"; exit 1; }

  out=$(srun -n 8 -c 12 --gpus-per-node=8 --train-runtime bash -c "$task_env" 2>&1)
  want=$("$topo" --nccl-xml "$ndv5" --tasks 8 --format json)
  if python3 - "$out" "$want" <<'PY'; then pass "8 tasks on the 8-GPU ndv5 node: each task's environment equals trainrt-topo's placement"; else fail "8 tasks env == trainrt-topo" "$out"; fi
import json, sys
got = {}
for line in sys.argv[1].splitlines():
    rank, kv = line.split(" ", 1)
    k, v = kv.split("=", 1)
    got.setdefault(int(rank[1:]), {})[k] = v
want = json.loads(sys.argv[2])["ranks"]
ok = len(got) == 8
for r in want:
    g = got.get(r["local_rank"], {})
    for k, v in r["env"].items():
        expect = "0" if k == "TRAINRT_BIND" else v   # a cached XML of another box is never bound
        if g.get(k) != expect:
            print(f"rank {r['local_rank']}: {k}={g.get(k)!r}, trainrt-topo says {expect!r}"); ok = False
    for k, v in {"RANK": str(r["local_rank"]), "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "8"}.items():
        if g.get(k) != v: print(f"rank {r['local_rank']}: {k}={g.get(k)!r}, want {v}"); ok = False
    if not g.get("MASTER_ADDR") or not g.get("MASTER_PORT"): print("no MASTER_*"); ok = False
sys.exit(0 if ok else 1)
PY

  out=$(srun -n 16 -c 6 --gres=gpu:8 --train-runtime=tasks-per-gpu=2,gpus=visible-all bash -c "$task_env" 2>&1)
  if grep -q "^R3 CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7$" <<<"$out" && grep -q "^R3 TRAINRT_CUDA_DEVICE=1$" <<<"$out" &&
     grep -q "^R15 TRAINRT_CUDA_DEVICE=7$" <<<"$out"; then
    pass "tasks-per-gpu=2 with gpus=visible-all: every GPU visible, TRAINRT_CUDA_DEVICE = own"
  else fail "tasks-per-gpu/visible-all" "$(grep -E 'CUDA' <<<"$out" | head -8)"; fi

  out=$(srun -n 2 -c 12 --gpus-per-task=1 --train-runtime=show true 2>&1)
  if grep -q "policy rail" <<<"$out" && grep -q "0101:00:00.0 (PIX)" <<<"$out"; then pass "show prints the node's placement table at launch"
  else fail "show" "$out"; fi

  out=$(srun -n 9 -c 1 --gres=gpu:8 --train-runtime bash -c 'echo RAN' 2>&1); rc=$?
  if [[ $rc -ne 0 ]] && grep -q "need 9 GPUs" <<<"$out" && ! grep -q RAN <<<"$out"; then
    pass "9 tasks on 8 GPUs fails the step with the numbers"
  else fail "9 tasks on 8 GPUs (rc=$rc)" "$out"; fi
  bash "$cluster" stop >/dev/null 2>&1
else
  echo "SKIPPED: $ndv5 is absent; real-topology Slurm tests did not run"
fi

# ---------------------------------------------------------------- this machine, live hwloc
bash "$cluster" start --mode live >/dev/null 2>"$work/start.log" || { cat "$work/start.log"; exit 1; }
ncpu=$(nproc)

out=$(srun -n 2 --train-runtime=policy=numa bash -c 'echo "$SLURM_PROCID $TRAINRT_CPUS $(grep Cpus_allowed_list /proc/self/status | cut -f2)"' 2>&1)
if [[ $(wc -l <<<"$out") -eq 2 ]] && awk '$2 != $3 {bad=1} END {exit bad}' <<<"$out" &&
   [[ $(awk '{print $3}' <<<"$out" | sort -u | wc -l) -eq 2 || $ncpu -lt 2 ]]; then
  pass "live topology: tasks are really pinned (Cpus_allowed_list == TRAINRT_CPUS, distinct)"
else fail "live pinning" "$out"; fi

out=$(srun -n 1 --train-runtime=policy=numa,bind=off bash -c 'grep Cpus_allowed_list /proc/self/status | cut -f2; echo $TRAINRT_BIND' 2>&1)
if [[ $(head -1 <<<"$out") == "0-$((ncpu - 1))" && $(tail -1 <<<"$out") == 0 ]]; then pass "bind=off exports but does not bind"
else fail "bind=off" "$out"; fi

bad_options=("policy=bogus" "tasks-per-gpu=0" "tasks-per-gpu=x" "colour=blue" "show=1" "policy=rail,policy=numa"
             "show,,bind=on" "bind=" "$(printf 'p%.0s' $(seq 1 1100))")
bad_ok=0
for opt in "${bad_options[@]}"; do
  out=$(srun -n 1 --train-runtime="$opt" bash -c 'echo RAN' 2>&1); rc=$?
  if [[ $rc -ne 0 ]] && grep -q -- "--train-runtime: .*; valid:" <<<"$out" && ! grep -q RAN <<<"$out"; then
    bad_ok=$((bad_ok + 1))
  else fail "bad option '${opt:0:40}' (rc=$rc)" "$out"; fi
done
[[ $bad_ok -eq ${#bad_options[@]} ]] && pass "${#bad_options[@]} malformed options rejected by srun before launch with a message"

out=$(TRAINRT_OPTS=policy=fast srun -n 1 --train-runtime bash -c 'echo RAN' 2>&1); rc=$?
if [[ $rc -ne 0 ]] && grep -q "TRAINRT_OPTS" <<<"$out" && ! grep -q RAN <<<"$out"; then pass "a bad TRAINRT_OPTS is rejected before launch"
else fail "bad TRAINRT_OPTS" "$out"; fi

out=$(TRAINRT_OPTS=policy=numa srun -n 1 --train-runtime bash -c 'echo $TRAINRT_POLICY' 2>&1)
[[ $out == numa ]] && pass "TRAINRT_OPTS supplies defaults" || fail "TRAINRT_OPTS defaults" "$out"

out=$(srun -n 1 --train-runtime=policy=rail bash -c 'echo RAN' 2>&1); rc=$?
if [[ $rc -ne 0 ]] && grep -q "policy=rail needs GPUs" <<<"$out" && ! grep -q RAN <<<"$out"; then
  pass "a placement failure in user_init fails the step visibly"
else fail "user_init failure (rc=$rc)" "$out"; fi

out=$(srun -n 1 bash -c 'echo "${TRAINRT_POLICY:-unset}"' 2>&1)
[[ $out == unset ]] && pass "without --train-runtime the plugin does nothing" || fail "inactive plugin" "$out"

cat > "$work/job.sbatch" <<'SB'
#!/bin/bash
#SBATCH --train-runtime=policy=numa
#SBATCH -n 2
#SBATCH -o job.out
srun -n 2 bash -c 'echo "step1 $SLURM_PROCID $TRAINRT_POLICY $RANK $WORLD_SIZE $MASTER_PORT"'
srun -n 1 bash -c 'echo "step2 $SLURM_PROCID $TRAINRT_POLICY $RANK $WORLD_SIZE $MASTER_PORT"'
srun -n 1 --overlap bash -c 'echo "conc $MASTER_PORT"; sleep 1' &
srun -n 1 --overlap bash -c 'echo "conc $MASTER_PORT"; sleep 1' &
wait
SB
jobid=$(sbatch --parsable "$work/job.sbatch")
for _ in $(seq 1 150); do squeue -h -j "$jobid" 2>/dev/null | grep -q . || break; sleep 0.1; done
out=$(cat "$work/job.out" 2>/dev/null)
if [[ $(grep -c "^step1 [01] numa [01] 2 " <<<"$out") -eq 2 && $(grep -c "^step2 0 numa 0 1 " <<<"$out") -eq 1 ]]; then
  pass "#SBATCH --train-runtime reaches every step of the batch script"
else fail "sbatch option" "$out"; fi
ports=$(grep "^conc" <<<"$out" | awk '{print $2}' | sort -u | wc -l)
p1=$(grep "^step1" <<<"$out" | awk '{print $6}' | head -1); p2=$(grep "^step2" <<<"$out" | awk '{print $6}')
if [[ $ports -eq 2 && -n $p1 && $p1 != "$p2" ]]; then pass "concurrent steps of one job get different MASTER_PORTs"
else fail "MASTER_PORT distinct" "$out"; fi

# ---------------------------------------------------------------- collectives under srun --mpi=pmix
mp=$build/tests/runtime/collectives_mp
for n in 2 4 8; do
  out=$(srun -n $n -O --mpi=pmix --train-runtime=policy=numa "$mp" verify 2>&1); rc=$?
  if [[ $rc -eq 0 && $(grep -c " 0 failed" <<<"$out") -eq $n ]]; then
    pass "srun --mpi=pmix -n $n: every shared-memory collective verified on every rank"
  else fail "collectives -n $n (rc=$rc)" "$(tail -5 <<<"$out")"; fi
done
out=$(srun -n 4 -O --mpi=pmix "$mp" die 2>&1)
[[ $(grep -c DEATH-DETECTED <<<"$out") -eq 3 ]] && pass "a rank killed mid-job is named by the 3 others within seconds" ||
  fail "dead rank detection under srun" "$out"

# ---------------------------------------------------------------- a bad plugstack.conf line
bash "$cluster" stop >/dev/null 2>&1
bash "$cluster" start --mode live --plugin-args "colour=blue" >/dev/null 2>&1
out=$(srun -n 1 --train-runtime=policy=numa bash -c 'echo RAN' 2>&1); rc=$?
plain=$(srun -n 1 bash -c 'echo PLAIN' 2>&1)
if [[ $rc -ne 0 ]] && grep -q "unknown key 'colour'" <<<"$out" && ! grep -q RAN <<<"$out" && [[ $plain == PLAIN ]] &&
   grep -q "unknown key 'colour'" "$TRAINRT_CLUSTER_DIR"/slurmd-*.log; then
  pass "unknown plugstack key: logged, fails only steps using the plugin, node stays up"
else fail "bad plugstack key (rc=$rc)" "$out" "$plain"; fi

# ---------------------------------------------------------------- two nodes in network namespaces
bash "$cluster" stop >/dev/null 2>&1
if bash "$cluster" start --mode live --nodes 2 >/dev/null 2>"$work/start2.log"; then
  run() { bash "$cluster" run "$@"; }
  # Rank 0 listens on MASTER_ADDR:MASTER_PORT, every other rank connects to it from its own node:
  # the rendezvous a torch env:// init needs, across real network namespaces.
  cat > "$work/rdv.py" <<'PY'
import os, socket, sys, time
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
if rank == 0:
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port)); s.listen(); s.settimeout(20)
    got = sorted(int(s.accept()[0].recv(16)) for _ in range(world - 1))
    print(f"rdv rank0 heard {got}")
else:
    for _ in range(200):
        try:
            c = socket.create_connection((addr, port), timeout=2); c.sendall(str(rank).encode()); break
        except OSError: time.sleep(0.05)
    else: sys.exit(f"rank {rank}: cannot reach {addr}:{port}")
print(f"rdv {os.environ['SLURMD_NODENAME']} R={rank} LR={os.environ['LOCAL_RANK']} WS={world} LWS={os.environ['LOCAL_WORLD_SIZE']} M={addr}:{port} N={os.environ['TRAINRT_NODE_ID']}/{os.environ['TRAINRT_NNODES']}")
PY
  out=$(run srun -N 2 -n 4 --train-runtime=policy=numa python3 "$work/rdv.py" 2>&1)
  want="rdv trt-n1 R=0 LR=0 WS=4 LWS=2 N=0/2
rdv trt-n1 R=1 LR=1 WS=4 LWS=2 N=0/2
rdv trt-n2 R=2 LR=0 WS=4 LWS=2 N=1/2
rdv trt-n2 R=3 LR=1 WS=4 LWS=2 N=1/2"
  got=$(grep "^rdv trt" <<<"$out" | sed -E 's/ M=10\.77\.0\.11:[0-9]+//' | sort)
  # MASTER_ADDR: the first node's address as every node resolves it (10.77.0.11), checked reachable.
  if [[ $got == "$want" ]] && grep -q "rdv rank0 heard \[1, 2, 3\]" <<<"$out" && [[ $(grep -c "M=10.77.0.11:" <<<"$out") -eq 4 ]]; then
    pass "2 nodes: RANK/LOCAL_RANK/WORLD_SIZE/MASTER_ADDR consistent; every rank reached MASTER_ADDR:MASTER_PORT"
  else fail "2 nodes" "$out"; fi
  # bind=off: both "nodes" are this one VM's cores, so binding pins the two node leaders to the same
  # core; Gloo between them then stalled for 20-300 s in 1 run of 3 (never with bind=off, never on
  # real nodes, which do not share cores).
  out=$(run srun -N 2 -n 4 --mpi=pmix --train-runtime=policy=numa,bind=off "$build/tests/runtime/collectives_mp" init 2>&1); rc=$?
  if [[ $rc -eq 0 && $(grep -c "host backend shm+gloo.* 0 failed" <<<"$out") -eq 4 ]]; then
    pass "2 nodes: trainrt::init() picks shared memory in each node + Gloo between leaders; every collective verified"
  else fail "2-node hierarchical collectives (rc=$rc)" "$(tail -5 <<<"$out")"; fi
  out=$(run srun -N 2 -n 4 --mpi=pmix --export=ALL,TRAINRT_HOST_BACKEND=gloo "$build/tests/runtime/collectives_mp" init 2>&1); rc=$?
  if [[ $rc -eq 0 && $(grep -c "host backend gloo.* 0 failed" <<<"$out") -eq 4 ]]; then
    pass "2 nodes: plain Gloo (rendezvoused over PMIx); every collective verified"
  else fail "2-node gloo collectives (rc=$rc)" "$(tail -5 <<<"$out")"; fi
  if [[ -x $build/tests/runtime/nccl_mp ]]; then
    out=$(run srun -N 2 -n 4 --mpi=pmix "$build/tests/runtime/nccl_mp" uid 2>&1)
    [[ $(grep -c UID-OK <<<"$out") -eq 4 ]] && pass "2 nodes: NCCL unique id handed to every rank over PMIx" ||
      fail "2-node NCCL uid" "$out"
  fi
else
  fail "2-node cluster did not start" "$(cat "$work/start2.log")"
fi

echo "slurm integration: $passed passed, $failed failed"
exit $((failed > 0))
