# Sourced by recovery.sh and recovery_soak.sh: the pieces both use to submit train.sbatch with a
# spare, find a node's trainer processes and read a run's outcome. Needs $trainer, $doctor, $tool,
# $repo, $work and $cluster set (and the cluster started).
crun() { timeout 300 bash "$cluster" run "$@"; }
final() { grep -o "FINAL step [0-9]* loss [0-9.]* params [0-9a-f]*" | head -1; }
tier_root=/dev/shm/trainrt-$(id -u)

# PIDs of job $1's trainer processes on node $2 (every process of the node's step).
pids_on() {
  local pid
  for pid in $(pgrep -f "^$trainer "); do  # the trainers, not srun (whose command line names it too)
    tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "SLURM_JOB_ID=$1" || continue
    tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "SLURMD_NODENAME=$2" && echo "$pid"
  done
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
