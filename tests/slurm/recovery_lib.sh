# Sourced by recovery.sh and recovery_soak.sh (with $build and $repo set): the programs under test,
# a private 3-node cluster, and the pieces both use to submit train.sbatch with a spare, find a
# node's trainer processes and read a run's outcome.
cluster=$repo/slurm_examples/local-cluster/cluster.sh
trainer=$build/slurm_examples/trainer/train-mlp
doctor=$build/doctor/trainrt-doctor
tool=$build/checkpoint/trainrt-ckpt

# start_recovery_cluster NAME CTLD_PORT SLURMD_PORT: skips (77) when not root, fails when a program
# is not built; else the harness (a scratch folder, pass/fail) and 3 live nodes, trt-n2's link put
# back up and the cluster stopped on exit.
start_recovery_cluster() {
  if [[ $(id -u) -ne 0 ]]; then echo "SKIPPED: the local Slurm cluster needs root"; exit 77; fi
  local f
  for f in "$trainer" "$doctor" "$tool"; do [[ -x $f ]] || { echo "FAIL: $f is not built"; exit 1; }; done
  source "$repo/tests/slurm/harness.sh"
  cluster_harness "$@"
  trap 'ip -n trt-n2 link set eth0 up 2>/dev/null; bash "$cluster" stop >/dev/null 2>&1; rm -rf "$work" "$TRAINRT_CLUSTER_DIR"' EXIT
  bash "$cluster" start --mode live --nodes 3 >/dev/null 2>"$work/start.log" || { cat "$work/start.log"; exit 1; }
}

crun() { timeout 300 bash "$cluster" run "$@"; }
final() { grep -o "FINAL step [0-9]* loss [0-9.]* params [0-9a-f]*" | head -1; }
# This user's memory tiers: under /run/trainrt where the cluster mounted it (huge pages), else /dev/shm.
tier_root() { echo "$("$tool" tier-base 2>/dev/null)/trainrt-$(id -u)"; }

# PIDs of job $1's trainer processes on node $2 (every process of the node's step). The environment
# is read whole first: `tr | grep -q` under pipefail fails whenever grep's early exit cuts tr off
# (SIGPIPE), which dropped a live process now and then.
pids_on() {
  local pid env
  for pid in $(pgrep -f "^$trainer "); do  # the trainers, not srun (whose command line names it too)
    env=$(tr '\0' '\n' 2>/dev/null <"/proc/$pid/environ") || continue  # 2> first: a process gone makes the < fail
    grep -qx "SLURM_JOB_ID=$1" <<<"$env" && grep -qx "SLURMD_NODENAME=$2" <<<"$env" && echo "$pid"
  done
  return 0
}

# submit_with_spare NAME TRAINER_ARGS...: train.sbatch on 3 nodes (2 ranks each), trt-n3 the spare;
# prints the job id. Its output goes to $work/NAME.out, its run directory is $work/NAME.
submit_with_spare() {
  local name=$1; shift
  export TRAINER=$trainer DOCTOR=$doctor CKPT_TOOL=$tool RUN_DIR=$work/$name MAX_RERUNS=2
  crun sbatch --parsable -N 3 --ntasks-per-node=2 --export=ALL,TRAINRT_SPARES=1 \
    --train-runtime=policy=numa,bind=off -o "$work/$name.out" "$repo/slurm_examples/train.sbatch" "$@"
}

# wait_for_trainers JOBID COUNT NODES...: the PIDs of the job's trainers on NODES once COUNT run.
wait_for_trainers() {
  local job=$1 count=$2 all n; shift 2
  for _ in $(seq 1 600); do
    all=$(for n in "$@"; do pids_on "$job" "$n"; done | tr '\n' ' ')
    [[ $(wc -w <<<"$all") -eq $count ]] && { echo "$all"; return 0; }
    sleep 0.1
  done
  return 1
}

wait_for_job_end() {  # wait_for_job_end JOBID
  for _ in $(seq 1 900); do crun squeue -h -j "$1" 2>/dev/null | grep -q . || return 0; sleep 0.2; done
  return 1
}

# The lines of a train.sbatch output that tell what the recovery did.
recovery_lines() {
  grep -E '^(doctor: (verdict|never)|train.sbatch|step failed|training finished|checkpoint: (restored|skipped)|memory tier: (removed|job)|FINAL)'
}

# tier_step_complete JOB STEP PROTECTION NODES: whether job JOB's memory tier holds a step at or past
# STEP complete on trt-n1..trt-nNODES (2 ranks each: ranks 2n-2 and 2n-1 on trt-nn): on every node
# its manifest and its own 2 shards, and with PROTECTION parity their 2 parity blocks, else (buddy
# copies, on the next node) the 2 shards of the node before it too. While a snapshot is being made
# the previous one is partly overwritten and a lost node falls back to the directory
# (docs/recovery.md "Windows"): a kill meant to land on a protected step waits for this.
tier_step_complete() {
  local job=$1 at=$2 protection=$3 nodes=$4 tiers step n f prev ok
  tiers=$(echo "$(tier_root)/job-$job"/ckpt-*)
  for step in $(ls "$tiers/trt-n1" 2>/dev/null | grep -E '^step_[0-9]+$' | sort -r); do
    (( 10#${step#step_} >= at )) || return 1
    ok=1
    for ((n = 1; n <= nodes; n++)); do
      [[ -f $tiers/trt-n$n/$step/MANIFEST.json ]] || ok=0
      for f in $((2 * n - 2)) $((2 * n - 1)); do
        [[ -f $tiers/trt-n$n/$step/rank_0000$f.shard ]] || ok=0
        [[ $protection != parity || -f $tiers/trt-n$n/$step/parity_0000$f.xor ]] || ok=0
      done
      [[ $protection == parity ]] && continue
      prev=$(( (n + nodes - 2) % nodes + 1 ))
      for f in $((2 * prev - 2)) $((2 * prev - 1)); do [[ -f $tiers/trt-n$n/$step/rank_0000$f.shard ]] || ok=0; done
    done
    (( ok )) && return 0
  done
  return 1
}
