#!/usr/bin/env bash
# The trainer's fault tests on a real local Slurm cluster, tasks launched by srun --mpi=pmix
# --train-runtime. Usage: trainer_faults.sh BUILD_DIR. Exit 77 when not root.
set -uo pipefail
build=$(cd "$1" && pwd)
repo=$(cd "$(dirname "$0")/../.." && pwd)
cluster=$repo/slurm_examples/local-cluster/cluster.sh
trainer=$build/slurm_examples/trainer/train-mlp
if [[ $(id -u) -ne 0 ]]; then echo "SKIPPED: the local Slurm cluster needs root"; exit 77; fi
source "$repo/tests/slurm/harness.sh"
cluster_harness faults 6927 6928
bash "$cluster" start --mode live >/dev/null 2>"$work/start.log" || { cat "$work/start.log"; exit 1; }
run() { srun -n 4 -O --mpi=pmix --kill-on-bad-exit=1 --train-runtime=policy=numa "$trainer" --steps 120 --ckpt-every 10 "$@"; }
final() { grep -o "FINAL step [0-9]* loss [0-9.]* params [0-9a-f]*" | awk '{print $3, $7}'; }

ref=$(run --ckpt-dir "$work/ref/c" --out "$work/ref/o" 2>&1 | final)
[[ -n $ref ]] && pass "uninterrupted run: $ref" || fail "reference run"

# Kill -9 of a rank at 5 points (rank, step): the step fails fast, the rerun resumes from the last
# commit and ends bitwise where the uninterrupted run ended.
for point in 1:7 3:23 2:50 0:77 1:111; do
  d=$work/kill-${point/:/-}
  t0=$(date +%s.%N)
  out=$(run --ckpt-dir "$d/c" --out "$d/o" --fault "kill:$point" 2>&1); rc=$?
  secs=$(echo "$(date +%s.%N) - $t0" | bc)
  again=$(run --ckpt-dir "$d/c" --out "$d/o" --fault "kill:$point" 2>&1)
  got=$(final <<<"$again")
  resumed=$(grep -o "restored step [0-9]*" <<<"$again" | head -1)
  [[ -z $resumed ]] && grep -q "starting fresh" <<<"$again" && resumed="started fresh (no checkpoint before the kill)"
  if [[ $rc -ne 0 && $(echo "$secs < 10" | bc) -eq 1 && $got == "$ref" && -n $resumed ]]; then
    pass "kill -9 rank ${point%%:*} at step ${point##*:}: failed in ${secs:0:4} s, rerun $resumed, final params identical"
  else fail "kill at $point (rc=$rc, ${secs:0:5} s, got '$got', want '$ref', $resumed)" "$(tail -4 <<<"$out")"; fi
done

# One rank stalls: the others' collective times out after --watchdog seconds, they dump their
# flight recorders naming it, and srun exits non-zero.
d=$work/stall
t0=$(date +%s.%N)
out=$(run --ckpt-dir "$d/c" --out "$d/o" --watchdog 3 --fault stall:2:30:60 2>&1); rc=$?
secs=$(echo "$(date +%s.%N) - $t0" | bc)
if [[ $rc -ne 0 && $(echo "$secs < 8" | bc) -eq 1 ]] && grep -q 'rank(s) 2' "$d/o/flight_rank0.json" &&
   grep -q '"in_flight": 30' "$d/o/flight_rank0.json" && grep -qE '"host": "[^"]+"' "$d/o/flight_rank0.json"; then
  pass "a stalled rank: watchdog fired in ${secs:0:4} s (timeout 3 s), dumps name rank 2 and their host, srun exit $rc"
else fail "stall (rc=$rc, ${secs:0:5} s)" "$(tail -5 <<<"$out")" "$(head -5 "$d/o/flight_rank0.json" 2>/dev/null)"; fi

# SIGUSR1 (what --signal=B:USR1@60 forwards): a final checkpoint, exit 75, and the next run resumes.
d=$work/usr1
run --ckpt-dir "$d/c" --out "$d/o" --steps 2000000 >"$work/usr1.log" 2>&1 &
pid=$!
sleep 2
jobid=$(squeue -h -o %i | head -1)
scancel --signal=USR1 "$jobid"
wait $pid; rc=$?
stopped=$(grep -o "stop signal at step [0-9]*" "$work/usr1.log" | awk '{print $5}')
again=$(run --ckpt-dir "$d/c" --out "$d/o" --steps $((stopped + 5)) 2>&1)
if [[ $rc -eq 75 && -n $stopped ]] && grep -q "restored step $stopped " <<<"$again" &&
   grep -q "FINAL step $((stopped + 5)) " <<<"$again"; then
  pass "SIGUSR1: final checkpoint at step $stopped, exit 75 (requeue), next run resumed from it"
else fail "SIGUSR1 (rc=$rc, stopped at '$stopped')" "$(tail -4 "$work/usr1.log")" "$(grep -E 'restored|FINAL' <<<"$again")"; fi

# The sbatch template: a rank dies, the template reruns the step inside the allocation, and the
# rerun finishes from the last checkpoint.
export TRAINER=$trainer RUN_DIR=$work/sbatch MAX_RERUNS=2
jobid=$(sbatch --parsable -n 4 -O --train-runtime=policy=numa -o "$work/sbatch.out" "$repo/slurm_examples/train.sbatch" \
        --steps 120 --ckpt-every 10 --fault kill:2:64)
for _ in $(seq 1 300); do squeue -h -j "$jobid" 2>/dev/null | grep -q . || break; sleep 0.1; done
out=$(cat "$work/sbatch.out" 2>/dev/null)
# Step 60's commit needs rank 2's shard status, and rank 2 dies 4 short steps (~1 ms) later: the
# rerun resumes at 60, or at 50 when the kill won that race (seen once in CI); under load a save due
# while the previous one still persists is deferred to the first step with none in flight (46 in
# CI under a parallel build). Any committed step before the kill (rank 2 dies before step 64's
# allreduce) is correct, the final params say.
resumed=$(grep -oE "restored step [0-9]+ " <<<"$out" | head -1)
step=${resumed//[^0-9]/}
[[ -n $step ]] && ((step >= 1 && step <= 63)) || resumed=
if grep -q "step failed (exit" <<<"$out" && grep -q "training finished" <<<"$out" && [[ -n $resumed ]] &&
   [[ $(final <<<"$out") == "$ref" ]]; then
  pass "train.sbatch: a rank killed at step 64, the template reran the step, it ${resumed% } and matched bitwise"
else fail "train.sbatch rerun (want: step failed, restored a step from 1 to 63, training finished, final $ref)" \
  "$(grep -E 'step failed|restored|skipped|FINAL|training finished|error|rerun' <<<"$out" | head -20)"; fi

# --signal=B:USR1 before the time limit: the template forwards it, the ranks commit a final
# checkpoint and exit 75, the template requeues the job, and the requeued job resumes from it.
export RUN_DIR=$work/requeue
jobid=$(sbatch --parsable -n 4 -O --train-runtime=policy=numa -o "$work/requeue.out" "$repo/slurm_examples/train.sbatch" \
        --steps 6000 --ckpt-every 500)
for _ in $(seq 1 100); do grep -q "^step   200 " "$work/requeue.out" 2>/dev/null && break; sleep 0.2; done
scancel --batch --signal=USR1 "$jobid"
for _ in $(seq 1 100); do grep -q "requeueing job" "$work/requeue.out" 2>/dev/null && break; sleep 0.2; done
# Skip Slurm's requeue hold-off, but only once the first run's step daemons have gone: the
# requeued job reuses the job id, and so the step ids.
for _ in $(seq 1 150); do pgrep -f "slurmstepd: \[$jobid\." >/dev/null || break; sleep 0.2; done
scontrol update JobId="$jobid" StartTime=now >/dev/null 2>&1
for _ in $(seq 1 300); do squeue -h -j "$jobid" 2>/dev/null | grep -q . || break; sleep 0.2; done
out=$(cat "$work/requeue.out" 2>/dev/null)
stopped=$(grep -o "stop signal at step [0-9]*" <<<"$out" | awk '{print $5}')
if [[ -n $stopped ]] && grep -q "exit code 75" <<<"$out" && grep -q "requeueing job" <<<"$out" &&
   grep -q "restart 1 on" <<<"$out" && grep -q "restored step $stopped " <<<"$out" && grep -q "FINAL step 6000 " <<<"$out"; then
  pass "requeue: USR1 to the batch shell, final checkpoint at step $stopped, job requeued (restart 1), resumed and finished"
else fail "requeue" "$(grep -vE '^step|removed|committed' <<<"$out" | tail -12)"; fi

echo "trainer faults: $passed passed, $failed failed"
exit $((failed > 0))
