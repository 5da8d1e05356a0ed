#!/usr/bin/env bash
# Recovery at kill points, nodes and faults that tests/slurm/recovery.sh does not pick: each round
# submits train.sbatch (4 ranks on trt-n1 + trt-n2, trt-n3 the spare, memory tier with buddy copies
# or parity) and, at a random step and a random moment inside it (snapshots and their persists
# included, not only the windows where a tier step is complete), hits one node with one fault:
#   lost  every trainer process of the node killed and its memory tier removed (the node is gone);
#   kill  every trainer process of the node killed, its tier left (processes lost, node alive);
#   link  its link taken down (trt-n2 only: trt-n1 runs the batch script, whose loss needs a requeue);
#   double  trt-n2 lost, then the spare trt-n3 lost too, at a random moment of its first seconds
#         (its restore included): no spare is left, so the world shrinks to trt-n1's 2 ranks.
# Every round must end with "training finished", the job's memory tier gone; with the world size
# kept (one fault: the spare takes the node's place) the final parameters must equal the
# uninterrupted run's bit for bit, whichever tier the step came from; after a double fault the
# last recovery must be a shrink that reaches the last step. Prints a line per round (fault, kill point, the step restored and from where,
# fault -> first step) and a summary. Not a CTest test (minutes, random): a soak for changes to the
# recovery path; docs/recovery.md "Soak" has its latest figures.
# SOAK_SECOND: the seconds between the spare's trainers starting and the second fault of "double"
# (default: random, 0-3 s). SOAK_ARGS: trainer options that replace the defaults' of the same name
# or add to them, e.g. "--ckpt-every 2 --ballast-mib 256" for kills while saves persist.
# SOAK_STEPS: steps per run (default 300, at least 21; the kill comes after a random step below
# STEPS - 20 plus up to 0.4 s, so a short run puts it near or after its end: e.g. SOAK_STEPS=21
# SOAK_ARGS="--ballast-mib 2048 --ckpt-every 100 --snapshot-every 100" kills during the final save).
# SOAK_FROM=I starts at round I (each round draws from SEED and its number alone, so rounds
# I..ROUNDS replay). SOAK_KEEP=DIR keeps every round's job output there.
# A kill or lost round whose survivors still run 1.5 s after the kill saves their threads' stacks
# (gdb, the main thread first) beside the outputs (SOAK_KEEP, else /tmp) and names the files.
# Usage: [SOAK_FAULTS="lost kill link double"] [SOAK_SECOND=S] [SOAK_STEPS=N] [SOAK_FROM=I] [SOAK_KEEP=DIR] recovery_soak.sh BUILD_DIR [ROUNDS (default 8)] [SEED (default: the time)]
set -uo pipefail
build=$(cd "$1" && pwd)
rounds=${2:-8} seed=${3:-$(date +%s)}
# Leading zeros mean octal to bash arithmetic: 010 would be 8 rounds, 08 an error. Digits are read
# as decimal here; the checks below name anything else.
decimal() { [[ $1 =~ ^[0-9]{1,15}$ ]] && echo $((10#$1)) || echo "$1"; }
rounds=$(decimal "$rounds") seed=$(decimal "$seed")
[[ $rounds =~ ^[0-9]+$ && $rounds -ge 1 ]] || { echo "recovery_soak.sh: ROUNDS '$rounds' must be a number >= 1" >&2; exit 2; }
[[ $seed =~ ^[0-9]+$ ]] || { echo "recovery_soak.sh: SEED '$seed' must be a number" >&2; exit 2; }
read -ra faults <<<"${SOAK_FAULTS:-lost kill link double}"
for f in "${faults[@]}"; do
  [[ $f =~ ^(lost|kill|link|double)$ ]] || { echo "recovery_soak.sh: SOAK_FAULTS names '$f'; valid: lost kill link double" >&2; exit 2; }
done
(( ${#faults[@]} )) || { echo "recovery_soak.sh: SOAK_FAULTS is empty" >&2; exit 2; }
first_round=$(decimal "${SOAK_FROM:-1}")
[[ $first_round =~ ^[0-9]+$ && $first_round -ge 1 ]] || { echo "recovery_soak.sh: SOAK_FROM '$first_round' must be a round number >= 1" >&2; exit 2; }
[[ -z ${SOAK_KEEP:-} || -d ${SOAK_KEEP:-} ]] || { echo "recovery_soak.sh: SOAK_KEEP '$SOAK_KEEP' is not a folder" >&2; exit 2; }
[[ -z ${SOAK_SECOND:-} || $SOAK_SECOND =~ ^[0-9]+(\.[0-9]+)?$ ]] ||
  { echo "recovery_soak.sh: SOAK_SECOND '$SOAK_SECOND' must be a number of seconds" >&2; exit 2; }
steps=$(decimal "${SOAK_STEPS:-300}")
[[ $steps =~ ^[0-9]+$ && $steps -ge 21 ]] || { echo "recovery_soak.sh: SOAK_STEPS '$steps' must be a number >= 21" >&2; exit 2; }
repo=$(cd "$(dirname "$0")/../.." && pwd)
source "$repo/tests/slurm/recovery_lib.sh"
start_recovery_cluster soak 7987 7988
args=(--device cpu --steps $steps --ckpt-every 20 --snapshot-every 10 --memory-tier --shard-optimizer --hidden 256 --watchdog 10)
read -ra more <<<"${SOAK_ARGS:-}"
declare -A given=()
for o in "${more[@]}"; do [[ $o == --* ]] && given[$o]=1; done
defaults=()
for ((k = 0; k < ${#args[@]}; k++)); do  # a default SOAK_ARGS gives again goes, with its value
  if [[ -n ${given[${args[k]}]:-} ]]; then [[ ${args[k + 1]:-} == --* ]] || ((k++)); continue; fi
  defaults+=("${args[k]}")
done
args=("${defaults[@]}" "${more[@]}")
ref=$(crun srun -N 2 -n 4 --mpi=pmix --train-runtime=policy=numa,bind=off "$trainer" "${args[@]}" \
      --ckpt-dir "$work/ref/c" --out "$work/ref/o" 2>&1 | final)
[[ -n $ref ]] && pass "uninterrupted run, 4 ranks on trt-n1 + trt-n2: $ref" || { fail "reference run"; exit 1; }
echo "seed $seed, $rounds rounds, trainer options: ${args[*]}"

steps_done() {  # training steps rank 0 has finished in this round's run (0 before its metrics exist)
  local n
  n=$(grep -c '"event":"step"' "$metrics" 2>/dev/null)
  echo "${n:-0}"
}

sources=()
for ((i = first_round; i <= rounds; i++)); do
  RANDOM=$((seed * 1000 + i))  # each round its own draw: SOAK_FROM=i replays round i of a seed
  fault=${faults[RANDOM % ${#faults[@]}]}
  victim=trt-n$((RANDOM % 2 + 1)); [[ $fault == link || $fault == double ]] && victim=trt-n2
  protection=buddies; extra=()
  (( RANDOM % 3 == 0 )) && { protection=parity; extra=(--tier-parity 2); }
  at_step=$((RANDOM % (steps - 20) + 1)) pause=$(printf '0.%03d' $((RANDOM % 400)))
  name=round$i
  jobid=$(submit_with_spare "$name" "${args[@]}" "${extra[@]}")
  metrics=$work/$name/out/metrics_rank0.jsonl
  if ! wait_for_trainers "$jobid" 4 trt-n1 trt-n2 >/dev/null; then
    fail "round $i: the job's 4 trainers never ran" "$(tail -5 "$work/$name.out")"; continue
  fi
  victims=$(pids_on "$jobid" "$victim" | tr '\n' ' ')
  survivors=$(pids_on "$jobid" "$([[ $victim == trt-n1 ]] && echo trt-n2 || echo trt-n1)" | tr '\n' ' ')
  if [[ -z ${victims// /} ]]; then
    fail "round $i: no trainer of job $jobid found on $victim"
    crun scancel "$jobid"; wait_for_job_end "$jobid"; continue
  fi
  for _ in $(seq 1 3000); do
    (( $(steps_done) >= at_step )) && break
    sleep 0.02
  done
  sleep "$pause"
  killed_after=$(steps_done)
  kill_at=$(date +%s.%N)
  case $fault in
    lost | double) kill -KILL $victims 2>/dev/null; rm -rf "$(tier_root)/job-$jobid"/ckpt-*/"$victim" ;;
    kill) kill -KILL $victims 2>/dev/null ;;
    link) ip -n "$victim" link set eth0 down ;;
  esac
  stacks=""
  if [[ $fault == kill || $fault == lost ]]; then
    # A survivor still running 1.5 s after a kill waits on something no failed collective ends (the
    # step's end then waits for Slurm's KillWait): its threads' stacks say what, for the report.
    # 1.5 s: a survivor's own end takes 0.1-0.9 s here, Slurm's KillWait SIGKILL comes at ~3 s. The
    # main thread first (gdb numbers it 1), every survivor at once: the SIGKILL may cut a dump short.
    sleep 1.5
    for pid in $survivors; do
      kill -0 "$pid" 2>/dev/null || continue
      stacks=${SOAK_KEEP:-/tmp}/recovery-soak-$seed-round$i-stacks
      { echo "== pid $pid, 1.5 s after the kill"
        timeout 20 gdb -p "$pid" -batch -ex "thread apply 1 bt" -ex "thread apply all bt" 2>&1; } >"$stacks-$pid.txt" &
    done
    wait
  fi
  second=""
  if [[ $fault == double ]]; then
    second=${SOAK_SECOND:-$(printf '%d.%03d' $((RANDOM % 3)) $((RANDOM % 1000)))}
    if spare_pids=$(wait_for_trainers "$jobid" 2 trt-n3); then
      sleep "$second"
      if kill -KILL $spare_pids 2>/dev/null; then
        rm -rf "$(tier_root)/job-$jobid"/ckpt-*/trt-n3
        second=" and trt-n3 +$second s after its trainers started"
      else  # the run was done before the second fault: judged as one fault
        fault=lost second=" (the run ended before trt-n3's +$second s)"
      fi
    else
      second=" (the spare's trainers never started)"
    fi
  fi
  if [[ $fault == link ]]; then
    for _ in $(seq 1 900); do grep -q '"event":"recovery"' "$metrics" 2>/dev/null && break; sleep 0.1; done
    ip -n "$victim" link set eth0 up
  fi
  wait_for_job_end "$jobid"
  out=$(cat "$work/$name.out")
  event=$(grep '"event":"recovery"' "$metrics" 2>/dev/null | tail -1)
  [[ $fault == link ]] && rm -rf "$(tier_root)/job-$jobid"  # the cut-off node's part (the next job there cleans it)
  what="round $i: $fault $victim ($protection) after step $killed_after (+$pause s)$second${stacks:+ (survivors alive 1.5 s after the kill: their stacks in $stacks-PID.txt)}"
  if [[ -z $event ]]; then
    outcome="no recovery"
  else
    outcome=$(python3 -c "
import json, sys
e = json.loads(sys.argv[1]); k = float(sys.argv[2])
p = e.get('phases', {})
end = 'the end (the fault came after the last step: nothing left to train)' if e.get('no_step_left') else 'the first step'
src = 'step %s restored from %s' % (e.get('restored_step'), e.get('restore_source')) if e.get('restored_step', -1) >= 0 else 'no step to restore (a fresh start)'
print('%s, %.2f s from the fault to %s (detection %.2f from the last step, verdict %.2f, launch %.2f, bootstrap %.2f, restore %.2f, first step %.2f)' % (src, e['times']['first_step_done'] - k, end, *(p.get(x, float('nan')) for x in ('detection_s', 'verdict_s', 'launch_s', 'bootstrap_s', 'restore_s', 'first_step_s'))))
" "$event" "$kill_at" 2>/dev/null || echo "unreadable recovery event")
  fi
  [[ -n ${SOAK_KEEP:-} ]] && cp "$work/$name.out" "$SOAK_KEEP/recovery-soak-$seed-$name.out"
  if [[ $fault == double ]]; then
    kept=0
    [[ $(final <<<"$out") == "FINAL step $steps "* ]] && grep -q '"kind":"shrink"' <<<"$event" && kept=1
  else
    kept=0
    [[ $(final <<<"$out") == "$ref" ]] && kept=1
  fi
  if grep -q '^training finished' <<<"$out" && (( kept )) && [[ -n $event ]] && [[ ! -e $(tier_root)/job-$jobid ]]; then
    pass "$what: $outcome, $([[ $fault == double ]] && echo "shrunk to 2 ranks, step $steps reached" || echo "final params bitwise equal")"
    sources+=("$(grep -o '"restore_source":"[a-z]*"' <<<"$event" | cut -d'"' -f4)")
  else
    fail "$what: $outcome" "final '$(final <<<"$out")', tier left: $(ls -d "$(tier_root)/job-$jobid" 2>/dev/null)" \
      "$(recovery_lines <<<"$out" | tail -20)"
    cp "$work/$name.out" "/tmp/recovery-soak-$seed-$name.out" 2>/dev/null && echo "  (output kept: /tmp/recovery-soak-$seed-$name.out)"
  fi
done
echo "restored from: $(printf '%s\n' "${sources[@]}" | sort | uniq -c | tr -s ' \n' ' ')"
echo "recovery soak (seed $seed): $passed passed, $failed failed"
exit $((failed > 0))
