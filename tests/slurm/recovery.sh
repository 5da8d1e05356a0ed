#!/usr/bin/env bash
# Recovery inside the allocation on a real 3-node local Slurm cluster (docs/recovery.md): train.sbatch
# with TRAINRT_SPARES=1 trains 4 ranks on trt-n1 and trt-n2 with the memory tier (snapshots every 10
# steps, the directory every 20). Mid-run every process of the job on trt-n2 is killed and that
# node's memory tier removed (a node lost with its memory):
#  (a) the doctor names trt-n2, the next step runs on trt-n1 + the spare trt-n3 at the same world
#      size, restores the newest snapshot from memory (the spare's ranks get their shards from the
#      buddy copies on trt-n1), the final parameters equal an uninterrupted run's bit for bit, the
#      metrics hold a recovery event with its phases, and the job's memory tier is gone at the end;
#  (b) the same, with trt-n1's buddy copies of trt-n2's ranks corrupted before the restore: the
#      memory tier's step is refused with the reason logged and the directory's step restores,
#      still bitwise equal at the end;
#  (c) trt-n2's link taken down instead (its processes alive, cut off): srun never hears the end of
#      its tasks, train.sbatch probes its slurmd, gets no answer and gives srun up at once (not
#      after STEP_END_WAIT), and the recovery goes on as in (a), bitwise equal at the end;
#  (d) (a) with parity instead of buddy copies (--tier-parity 2): the spare rebuilds trt-n2's
#      shards from the parities and the shards on trt-n1, bitwise equal at the end;
#  (e) (a), and the spare trt-n3 lost too as soon as its trainers run: with no spare left the world
#      shrinks to trt-n1's 2 ranks, which restore the 4 ranks' step from memory and reach the end.
# Usage: recovery.sh BUILD_DIR. Exit 77 (skipped) when not root.
set -uo pipefail
build=$(cd "$1" && pwd)
repo=$(cd "$(dirname "$0")/../.." && pwd)
source "$repo/tests/slurm/recovery_lib.sh"
start_recovery_cluster recovery 7967 7968
fault=kill protection=buddies second_fault=
args=(--device cpu --steps 300 --ckpt-every 20 --snapshot-every 10 --memory-tier --shard-optimizer --hidden 256 --watchdog 10)

# The uninterrupted run: the same 4 ranks on 2 nodes.
ref=$(crun srun -N 2 -n 4 --mpi=pmix --train-runtime=policy=numa,bind=off "$trainer" "${args[@]}" \
      --ckpt-dir "$work/ref/c" --out "$work/ref/o" 2>&1 | final)
[[ -n $ref ]] && pass "uninterrupted run, 4 ranks on trt-n1 + trt-n2: $ref" || { fail "reference run"; exit 1; }

# The kill waits for a complete tier step (both nodes), with the job frozen so that nothing moves
# between the look and the kill.
protected() { tier_step_complete "$1" "$2" "$protection" 2; }
freeze_when_protected() {  # freeze_when_protected JOBID STEP PIDS...: 0 with the PIDs stopped
  local job=$1 step=$2; shift 2
  for _ in $(seq 1 1500); do
    if protected "$job" "$step"; then
      kill -STOP "$@"
      protected "$job" "$step" && return 0
      kill -CONT "$@"
    fi
    sleep 0.02
  done
  return 1
}

# Submits train.sbatch on 3 nodes with 1 spare; kills trt-n2's processes once a snapshot of step
# 40 or later is protected,
# after running "$@" on the frozen job (all its trainer processes stopped, so no save moves on).
run_case() {  # run_case NAME [command run while frozen...]
  local name=$1 jobid; shift
  RUN_DIR=$work/$name
  jobid=$(submit_with_spare "$name" "${args[@]}")
  local all victims
  all=$(wait_for_trainers "$jobid" 4 trt-n1 trt-n2)
  victims=$(pids_on "$jobid" trt-n2 | tr '\n' ' ')
  [[ -n ${victims// /} ]] || { fail "$name: no trainer of job $jobid found on trt-n2" "$(tail -5 "$work/$name.out")"; return 1; }
  if ! freeze_when_protected "$jobid" 40 $all; then
    fail "$name: no complete snapshot of step 40 or later in the memory tier" "$(tail -5 "$work/$name.out")"; return 1
  fi
  tiers=$(echo "$(tier_root)/job-$jobid"/ckpt-*)
  "$@"
  if [[ $fault == kill ]]; then
    rm -rf "$tiers/trt-n2"               # the lost node's memory goes with it
    kill_at=$(date +%s.%N)
    kill -KILL $victims
  else
    kill_at=$(date +%s.%N)
    ip -n trt-n2 link set eth0 down      # cut off: its processes and its tier live on, out of reach
  fi
  killed_after=$(grep -c '"event":"step"' "$RUN_DIR/out/metrics_rank0.jsonl")
  kill -CONT $all 2>/dev/null
  if [[ $second_fault == spare ]]; then  # the spare lost too, as soon as its trainers run (its restore)
    spare_pids=$(wait_for_trainers "$jobid" 2 trt-n3) && kill -KILL $spare_pids && rm -rf "$tiers/trt-n3"
  fi
  if [[ $fault == link ]]; then
    # Up again once the recovery event is written: the old step then ends on trt-n2 too.
    for _ in $(seq 1 600); do grep -q '"event":"recovery"' "$RUN_DIR/out/metrics_rank0.jsonl" && break; sleep 0.1; done
    ip -n trt-n2 link set eth0 up
  fi
  wait_for_job_end "$jobid"
  out=$(cat "$work/$name.out")
  echo "$out" | recovery_lines | sed 's/^/  | /'
  job_tier=$(tier_root)/job-$jobid
}
phases() {  # phases EVENT FAULT: the time from the fault to the first step, the recovery's phases, rank 0's restore's;
  # fails unless those restore phases run from find to install within the restore phase
  python3 -c "
import json, sys
e = json.loads(sys.argv[1]); k = float(sys.argv[2])
p = e['phases']; t = e['times']
print('  | from the %s: %.2f s to the first step (' % (sys.argv[3], t['first_step_done'] - k) + ', '.join('%s %.2f' % (n[:-2], v) for n, v in p.items()) + ')')
r = e['restore_phases']
print('  | rank 0\'s restore: ' + ', '.join('%s %.3f' % (x['phase'], x['s']) for x in r))
# Rank 0's restore phases tile its restore() call, which the restore phase holds.
names = [x['phase'] for x in r]
sys.exit(0 if names[:1] == ['find'] and names[-1:] == ['install'] and 0 <= sum(x['s'] for x in r) <= p['restore_s'] + 1e-6 else 1)
" "$1" "$kill_at" "$2"
}
corrupt_buddy_copies() {  # every copy trt-n1 holds of ranks 2 and 3
  local f
  for f in "$tiers"/trt-n1/step_*/rank_0000[23].shard; do
    printf 'garbage' | dd of="$f" bs=1 seek=8192 conv=notrunc status=none
  done
}

# ---------------------------------------------------------------- (a) lost node, spare, memory
run_case spare
restored=$(grep -oE "restored step [0-9]+ from the memory tier" <<<"$out" | grep -oE "[0-9]+" | head -1)
moved=$(grep -oE "the job copied [0-9]+ shard" <<<"$out" | grep -oE "[0-9]+" | head -1)
event=$(grep '"event":"recovery"' "$RUN_DIR/out/metrics_rank0.jsonl" | tail -1)
if grep -q "replacing trt-n2 -> trt-n3" <<<"$out" && [[ -n $restored && $restored -ge 40 && ${moved:-0} -ge 2 ]] &&
   [[ $(final <<<"$out") == "$ref" ]] && grep -q '^training finished' <<<"$out" &&
   grep -q '"restore_source":"memory"' <<<"$event" && grep -q '"kind":"spare"' <<<"$event" && [[ ! -e $job_tier ]]; then
  pass "trt-n2's ranks killed after step $killed_after: trt-n3 took its place (4 ranks), step $restored restored from memory ($moved shards from buddy copies), final params bitwise equal; tier removed at the end"
  phases "$event" kill || fail "spare: rank 0's restore phases do not tile its restore" "event: $event"
else fail "spare + memory tier" "restored='$restored' moved='$moved' final='$(final <<<"$out")' tier left: $(ls -d "$job_tier" 2>/dev/null)" \
  "event: $event" "$(grep -vE '^step ' <<<"$out" | tail -30)"; fi

# ---------------------------------------------------------------- (b) corrupted buddy copies
run_case corrupt corrupt_buddy_copies
if grep -q "replacing trt-n2 -> trt-n3" <<<"$out" && grep -qE "restored step [0-9]+ from the checkpoint directory" <<<"$out" &&
   grep -qE "skipped step [0-9]+ in the memory tier: no verified copy left in memory of rank 2's shard.*fails its checksum" <<<"$out" &&
   [[ $(final <<<"$out") == "$ref" ]] && grep -q '^training finished' <<<"$out"; then
  pass "trt-n2's ranks killed after step $killed_after and trt-n1's buddy copies of them corrupted: the memory tier's step refused, reason logged, the directory's step restored, final params bitwise equal"
  grep -m1 -oE "skipped step [0-9]+ in the memory tier: .{0,160}" <<<"$out" | sed 's/^/  | /'
else fail "corrupted buddy copy" "$(grep -vE '^step ' <<<"$out" | tail -30)"; fi

# ---------------------------------------------------------------- (c) trt-n2 cut off
# Its link down, its ranks alive: srun cannot hear their end, so train.sbatch probes trt-n2's slurmd
# and, with no answer, gives srun up at once (not after STEP_END_WAIT, set far out of reach here).
fault=link; export STEP_END_WAIT=120
run_case link
event=$(grep '"event":"recovery"' "$RUN_DIR/out/metrics_rank0.jsonl" | tail -1)
rm -rf "$job_tier"  # trt-n2's part: left out of the job, the next job there cleans it (tier-clean --finished)
if grep -qE "srun heard no end of the tasks on trt-n2, whose slurmd \([0-9.]+:7968\) accepted no connection" <<<"$out" &&
   grep -q "replacing trt-n2 -> trt-n3" <<<"$out" && grep -q '"restore_source":"memory"' <<<"$event" &&
   [[ $(final <<<"$out") == "$ref" ]] && grep -q '^training finished' <<<"$out"; then
  pass "trt-n2's link down after step $killed_after: its slurmd did not answer the probe, trt-n3 took its place, restored from memory, final params bitwise equal"
  phases "$event" "link down" || fail "link down: rank 0's restore phases do not tile its restore" "event: $event"
else fail "link down" "event: $event" "$(grep -vE '^step ' <<<"$out" | tail -30)"; fi

# ---------------------------------------------------------------- (d) parity instead of buddy copies
# --tier-parity 2: trt-n1 and trt-n2 form a group; each rank keeps one parity block of its row, and
# the spare rebuilds trt-n2's shards from the parities and shards left on trt-n1.
fault=kill protection=parity; unset STEP_END_WAIT
args+=(--tier-parity 2)
run_case parity
event=$(grep '"event":"recovery"' "$RUN_DIR/out/metrics_rank0.jsonl" | tail -1)
if grep -q "replacing trt-n2 -> trt-n3" <<<"$out" && grep -qE "step [0-9]+: 2 shard\(s\) rebuilt from parity" <<<"$out" &&
   grep -q '"restore_source":"memory"' <<<"$event" && [[ $(final <<<"$out") == "$ref" ]] && grep -q '^training finished' <<<"$out" &&
   [[ ! -e $job_tier ]]; then
  pass "parity instead of buddy copies: trt-n2's ranks killed after step $killed_after, trt-n3 rebuilt their shards from parity, final params bitwise equal; tier removed at the end"
  phases "$event" kill || fail "parity: rank 0's restore phases do not tile its restore" "event: $event"
else fail "parity" "event: $event" "tier left: $(ls -d "$job_tier" 2>/dev/null)" "$(grep -vE '^step ' <<<"$out" | tail -30)"; fi

# ---------------------------------------------------------------- (e) the spare lost too
# A spare that fails is left out like any node; with none left the world shrinks (train.sbatch:
# MAX_EXCLUDED counts the nodes the world lost, not the one the spare replaced). The spare's ranks
# die before they write a flight recorder: the doctor must not read their predecessors' instead.
protection=buddies second_fault=spare
args=("${args[@]:0:${#args[@]}-2}")  # no --tier-parity
run_case spare-lost
event=$(grep '"event":"recovery"' "$RUN_DIR/out/metrics_rank0.jsonl" | tail -1)
if grep -q "replacing trt-n2 -> trt-n3" <<<"$out" && grep -q "rerunning without trt-n2,trt-n3" <<<"$out" &&
   grep -q '"kind":"shrink"' <<<"$event" && grep -q '"restore_source":"memory"' <<<"$event" &&
   [[ $(final <<<"$out") == "FINAL step 300 "* ]] && grep -q '^training finished' <<<"$out" && [[ ! -e $job_tier ]]; then
  pass "trt-n2 lost after step $killed_after, then the spare trt-n3 as its trainers started: the world shrank to trt-n1's 2 ranks, restored from memory, reached step 300; tier removed at the end"
else fail "spare lost too" "event: $event" "tier left: $(ls -d "$job_tier" 2>/dev/null)" "$(grep -vE '^step ' <<<"$out" | tail -30)"; fi

echo "recovery: $passed passed, $failed failed"
exit $((failed > 0))
