#!/usr/bin/env bash
# Recovery time as an operator sees it (docs/recovery.md, figures in docs/performance.md): on a
# private local Slurm cluster of network-namespace nodes, train.sbatch runs train-mlp (4 ranks on 2
# nodes, --shard-optimizer, --ballast-mib of extra state) and trt-n2 is lost mid-run, by FAULT:
#   kill    (default) every process of the job on trt-n2 is SIGKILLed, its memory tier removed
#   link    trt-n2's link goes down (`ip -n trt-n2 link set eth0 down`): its processes live on, cut
#           off, its tier stays on it but out of reach; the link comes back up once the recovery
#           event is written (or after LINK_DOWN_S, default 120 s), and in the EXIT trap
# Measured: the fault to the first completed step after it, and the phases the recovery event records
# (detection, verdict, launch, bootstrap, restore and its tier, first step), for
#   spare   memory tier + a spare node at the same world size (-N 3, TRAINRT_SPARES=1)
#   shrink  memory tier, no spare: the rerun on trt-n1 alone (2 ranks), resharded from memory
#   disk    today's path: no memory tier, the shrink rerun restores from the checkpoint directory
#           with the page cache dropped right after the kill
#   parity  6 ranks on 3 nodes and a spare (-N 4), the memory tier with parity over the 3 nodes
#           (--tier-parity 3) instead of buddy copies: the spare rebuilds trt-n2's shards from the
#           parities on trt-n1 and trt-n3 (same --ballast-mib per rank, so 1.5x the state in all;
#           --watchdog PARITY_WATCHDOG, default 10)
# plus the memory tier's host memory per node (tier bytes / the node's own shard bytes) and each
# snapshot's stall. Scenarios alternate, REPS rounds. Runs as root. The local cluster is the
# machine's one trt-* cluster (cluster.sh removes trt-* namespaces it finds at start): never run it
# beside a Slurm test; on a shared machine serialize both with one lock, e.g.
#   flock /tmp/trainrt-heavy.lock bash benchmarks/recovery.sh build 2048 2
# Usage: [FAULT=kill|link] benchmarks/recovery.sh [BUILD_DIR] [BALLAST_MIB_TOTAL] [REPS] [SCENARIOS]
set -uo pipefail
fault=${FAULT:-kill}
[[ $fault == kill || $fault == link ]] || { echo "recovery.sh: FAULT='$fault' must be kill or link"; exit 1; }
build=$(cd "${1:-build}" && pwd)
ballast=${2:-2048} reps=${3:-2} scenarios=${4:-"spare shrink disk"}
repo=$(cd "$(dirname "$0")/.." && pwd)
# The programs ($cluster, $trainer, ...) and pids_on, shared with the recovery tests; crun and final
# are this benchmark's own (longer timeout; the parameters alone).
source "$repo/tests/slurm/recovery_lib.sh"
[[ $(id -u) -eq 0 ]] || { echo "recovery.sh: the local cluster and dropping the page cache need root"; exit 1; }
for f in "$trainer" "$build/doctor/trainrt-doctor" "$build/checkpoint/trainrt-ckpt"; do
  [[ -x $f ]] || { echo "recovery.sh: $f is not built"; exit 1; }
done
export TRAINRT_BUILD_DIR=$build TRAINRT_CLUSTER_DIR=/tmp/trainrt-recovery-bench TRAINRT_SLURMCTLD_PORT=7987 TRAINRT_SLURMD_PORT=7988
export SLURM_CONF=$TRAINRT_CLUSTER_DIR/slurm.conf
work=$(mktemp -d /var/tmp/recovery-bench.XXXXXX)
# KEEP=1 keeps the runs' folders (outputs, metrics) for a look afterwards; a round with a recovery
# nobody caused keeps them too.
# Jobs first: stopping the daemons alone leaves a running job's slurmstepd and trainers behind.
# The memory tiers of the jobs submitted here go too: a job cut short leaves its tier, and the next
# cluster numbers its jobs from 1 again (a stale tier of the same job id would pass for the new one's).
submitted=""
trap 'ip -n trt-n2 link set eth0 up 2>/dev/null; timeout 20 bash "$cluster" run scancel -u "$(id -un)" >/dev/null 2>&1; sleep 3; bash "$cluster" stop >/dev/null 2>&1; for j in $submitted; do rm -rf "$(tier_root)/job-$j"; done; [[ -n ${KEEP:-} ]] || rm -rf "$work"; rm -rf "$TRAINRT_CLUSTER_DIR"' EXIT
cluster_nodes=3; [[ " $scenarios " == *" parity "* ]] && cluster_nodes=4
bash "$cluster" start --mode live --nodes $cluster_nodes >/dev/null 2>"$work/start.log" || { cat "$work/start.log"; exit 1; }
crun() { timeout 600 bash "$cluster" run "$@"; }
export TRAINER=$trainer DOCTOR=$build/doctor/trainrt-doctor CKPT_TOOL=$build/checkpoint/trainrt-ckpt MAX_RERUNS=2
# --hidden 2048: steps of about 0.1 s here, so a snapshot every 10 steps leaves time for its persist.
base=(--device cpu --steps ${STEPS:-250} --shard-optimizer --hidden ${HIDDEN:-2048} --watchdog 2 --ballast-mib "$ballast")
echo "# $(date -u +%FT%TZ), $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB, uptime:$(uptime);" \
     "4 ranks on 2 nodes, ballast $ballast MiB in total, --watchdog 2, fault: $fault"

# The uninterrupted run the spare scenario (same world size) must end equal to, bit for bit.
final() { grep -o "FINAL step [0-9]* loss [0-9.]* params [0-9a-f]*" | tail -1 | sed 's/.* params //'; }
# Its collective timeout is 10 s: a save's stall on this VM has reached 2.07 s, and the figure wanted
# here is the parameters, which no timeout changes.
ref_args=("${base[@]}")
for i in "${!ref_args[@]}"; do [[ ${ref_args[i]} != --watchdog ]] || ref_args[i + 1]=10; done
crun srun -N 2 -n 4 --mpi=pmix --train-runtime=policy=numa,bind=off "$trainer" "${ref_args[@]}" \
  --ckpt-dir "$work/ref/c" --out "$work/ref/o" >"$work/ref.out" 2>&1
ref=$(final <"$work/ref.out")
rm -rf "$work/ref"
echo "# uninterrupted run, 4 ranks on 2 nodes: params ${ref:-(none: the run failed; its last lines follow)}"
[[ -n $ref ]] || tail -n 15 "$work/ref.out" | sed 's/^/#   /'
# The parity scenario's arguments: the same ballast per rank for 6 ranks, and a 10 s collective
# timeout (6 ranks on this 2-core VM timed out at 2 s while the parity of a snapshot was made).
base6=(--device cpu --steps ${STEPS:-250} --shard-optimizer --hidden ${HIDDEN:-2048} --watchdog ${PARITY_WATCHDOG:-10}
       --ballast-mib $((ballast * 3 / 2)))
ref6=
if [[ " $scenarios " == *" parity "* ]]; then  # the parity scenario's world: 6 ranks on 3 nodes
  crun srun -N 3 -n 6 --mpi=pmix --train-runtime=policy=numa,bind=off "$trainer" "${base6[@]}" \
    --ckpt-dir "$work/ref6/c" --out "$work/ref6/o" >"$work/ref6.out" 2>&1
  ref6=$(final <"$work/ref6.out"); rm -rf "$work/ref6"
  echo "# uninterrupted run, 6 ranks on 3 nodes: params ${ref6:-(none: the run failed)}"
fi

# Whether scenario $1's job $2 (run folder $3) has its newest checkpoint at or past step $4 complete.
complete() {
  local step
  if [[ $1 == disk ]]; then
    for step in $(ls "$3/ckpt" 2>/dev/null | grep -E '^step_[0-9]+$' | sort -r); do
      (( 10#${step#step_} >= $4 )) && [[ -f $3/ckpt/$step/MANIFEST.json ]] && return 0
    done
    return 1
  fi
  if [[ $1 == parity ]]; then tier_step_complete "$2" "$4" parity 3; else tier_step_complete "$2" "$4" buddies 2; fi
}
step_count() { local n; n=$(grep -c "\"event\":\"step\"" "$1/out/metrics_rank0.jsonl" 2>/dev/null); echo "${n:-0}"; }

run_one() {  # run_one SCENARIO ROUND
  local s=$1 round=$2 run=$work/$1-$2 nodes=2 spares=0 args=("${base[@]}") jobid at want=2 ref_params=$ref
  case $s in
    parity) nodes=4 spares=1 want=4 ref_params=$ref6 args=("${base6[@]}")
            args+=(--memory-tier --tier-parity 3 --snapshot-every 10 --ckpt-every 50) ;;
    spare) nodes=3 spares=1; args+=(--memory-tier --snapshot-every 10 --ckpt-every 50) ;;
    shrink) args+=(--memory-tier --snapshot-every 10 --ckpt-every 50) ;;
    disk) args+=(--ckpt-every 10) ;;
  esac
  export RUN_DIR=$run
  jobid=$(crun sbatch --parsable -N $nodes --ntasks-per-node=2 --export=ALL,TRAINRT_SPARES=$spares \
          --train-runtime=policy=numa,bind=off -o "$run.out" "$repo/slurm_examples/train.sbatch" "${args[@]}")
  submitted+=" $jobid"
  # The 4 trainers first (the kill must find them), then the moment the newest checkpoint at or past
  # step `at` is complete: with the memory tier its manifest and all 4 shards on trt-n1 and trt-n2
  # (each node's own and its buddy copies), else the directory's manifest. The job is frozen
  # (SIGSTOP) between that look and the kill, so no save moves on in between, and thawed right
  # after it. A loss while a checkpoint is being made is another case: the previous one is partly
  # overwritten by then (docs/recovery.md "Windows").
  at=$((60 + 10 * round))
  local all="" victims="" survivors="" _
  for _ in $(seq 1 1200); do
    survivors=$( (pids_on "$jobid" trt-n1; [[ $s != parity ]] || pids_on "$jobid" trt-n3) | tr '\n' ' ')
    victims=$(pids_on "$jobid" trt-n2 | tr '\n' ' ')
    [[ $(wc -w <<<"$survivors") -eq $want && $(wc -w <<<"$victims") -eq 2 ]] && break
    sleep 0.1
  done
  all="$survivors $victims"
  if [[ $(wc -w <<<"$victims") -ne 2 || $(wc -w <<<"$survivors") -ne $want ]]; then
    echo "$s round $round: trt-n2's 2 trainers not found (found: '$all'); skipped"
    crun scancel "$jobid"; return
  fi
  local frozen=0
  for _ in $(seq 1 3000); do
    if complete "$s" "$jobid" "$run" "$at"; then
      kill -STOP $all
      complete "$s" "$jobid" "$run" "$at" && { frozen=1; break; }
      kill -CONT $all
    fi
    sleep 0.05
  done
  if (( ! frozen )); then
    echo "$s round $round: no complete checkpoint of step $at or later in time; skipped"
    crun scancel "$jobid"; return
  fi
  local tiers mem own
  tiers=$(echo "$(tier_root)/job-$jobid"/ckpt-*)
  if [[ -d $tiers/trt-n2 ]]; then
    mem=$(du -sb --apparent-size "$tiers/trt-n2" | cut -f1)
    own=$(find "$tiers/trt-n2" -path '*/step_*/rank_0000[23].shard' -printf '%s\n' | awk '{s += $1} END {printf "%.0f\n", s}')
  fi
  local kill_at killed_after
  killed_after=$(step_count "$run")
  local recs_before
  recs_before=$(grep -c '"event":"recovery"' "$run/out/metrics_rank0.jsonl" 2>/dev/null); recs_before=${recs_before:-0}
  # A killed node's memory goes with it; a cut-off node keeps its tier, out of reach.
  [[ $fault == kill ]] && rm -rf "$tiers/trt-n2"
  [[ $s == disk ]] && { sync; echo 3 >/proc/sys/vm/drop_caches; }
  kill_at=$(date +%s.%N)
  if [[ $fault == kill ]]; then
    kill -KILL $victims
  else
    ip -n trt-n2 link set eth0 down
  fi
  kill -CONT $all 2>/dev/null
  if [[ $fault == link ]]; then
    # Down until the recovery event is written (the measurement is over) or LINK_DOWN_S; what
    # Slurm makes of the cut-off node and the old step meanwhile goes to $run.slurm.
    local up_at
    for _ in $(seq 1 $(( ${LINK_DOWN_S:-120} * 2 ))); do
      (( $(grep -c '"event":"recovery"' "$run/out/metrics_rank0.jsonl" 2>/dev/null) > recs_before )) && break
      crun squeue -h -j "$jobid" 2>/dev/null | grep -q . || break
      sleep 0.5
    done
    { echo "# $(date +%s.%N) link down for $(awk -v a="$kill_at" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}') s"
      crun squeue -s -j "$jobid"; crun sinfo -N -o '%N %T %E'
      crun scontrol show job "$jobid" | grep -E 'JobState|NodeList'; } >"$run.slurm" 2>&1
    sed "s/^/$s round $round, while down: /" "$run.slurm"
    ip -n trt-n2 link set eth0 up
    up_at=$(date +%s.%N)
    echo "$s round $round: trt-n2's link down $(awk -v a="$kill_at" -v b="$up_at" 'BEGIN {printf "%.1f", b - a}') s;" \
         "then: $(crun squeue -h -s -j "$jobid" -o '%i %N' 2>/dev/null | paste -sd';' -)"
  fi
  for _ in $(seq 1 3000); do crun squeue -h -j "$jobid" 2>/dev/null | grep -q . || break; sleep 0.2; done
  [[ $fault == link ]] && rm -rf "$tiers/trt-n2"   # left out of the job: tier-clean --job did not reach it
  local params
  params=$(final <"$run.out")
  echo "kill_at=$kill_at killed_after=$killed_after tier_bytes=${mem:-0} own_bytes=${own:-0}" >"$run.kill"
  rm -rf "$run/ckpt"  # gigabytes per run: KEEP=1 keeps outputs and metrics, never the checkpoints
  FAULT=$fault python3 - "$s" "$round" "$kill_at" "$killed_after" "$run" "${mem:-0}" "${own:-0}" "$params" "$ref_params" <<'PY'
import json, sys, glob, statistics, os
fault = os.environ.get("FAULT", "kill")
s, rnd, kill_at, killed_after, run = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4], sys.argv[5]
mem, own = int(float(sys.argv[6])), int(float(sys.argv[7]))
params, ref = sys.argv[8], sys.argv[9]
# Only a run that kept its world size (a spare) must end bitwise equal; a shrink changes the sum order.
equal = ("equal" if params == ref else "DIFFERENT") if params and ref else "unknown"
lines = [json.loads(l) for l in open(f"{run}/out/metrics_rank0.jsonl") if l.strip().startswith("{")]
rec = [l for l in lines if l.get("event") == "recovery"]
final = open(f"{run}.out").read()
ok = "training finished" in final
# The recovery from this kill: the first whose first step came after it. Any other is a failure
# nobody caused (a collective timing out under load), counted and shown.
after = [l for l in rec if l["wall"] > kill_at]
others = len(rec) - (1 if after else 0)
if others or not after:  # a failure nobody caused: the shell prints its lines and keeps the run
    open(f"{run}.unexpected", "w").write(f"{others}\n")
if not after:
    print(f"{s:6} round {rnd}: no recovery after the {fault} (finished: {ok}, other recoveries {others})"); sys.exit(0)
e = after[0]; p = e["phases"]; t = e["times"]
if e["kind"] == "shrink": equal += " (world size changed: not expected equal)"
stalls = [l["ckpt_stall_s"] for l in lines if l.get("event") == "step" and l.get("ckpt_stall_s", 0) > 0.001]
row = {"scenario": s, "fault": fault, "round": int(rnd), "killed_after_step": int(killed_after), "restored_step": e["restored_step"],
       "source": e["restore_source"], "moved_copies": e["moved_copies"], "kind": e["kind"], "finished": ok,
       "kill_to_first_step_s": t["first_step_done"] - kill_at, "fault_to_detect_s": t["detected_at"] - kill_at,
       "phases": p, "tier_bytes_node2": mem, "own_shard_bytes_node2": own,
       "stall_median_s": statistics.median(stalls) if stalls else None, "other_recoveries": others,
       "params_vs_uninterrupted": equal}
print(json.dumps(row), file=open(f"{run}.json", "w"))
mem_ratio = f"{mem / own:.2f}x" if own else "-"
print(f"{s:6} round {rnd}: {fault} after step {killed_after} -> first step {row['kill_to_first_step_s']:6.2f} s"
      f" (detect {row['fault_to_detect_s']:.2f}, verdict {p['verdict_s']:.2f}, launch {p['launch_s']:.2f},"
      f" bootstrap {p['bootstrap_s']:.2f}, restore {p['restore_s']:.2f} {e['restore_source']} step {e['restored_step']},"
      f" first step {p['first_step_s']:.2f}); {e['kind']}, {e['moved_copies']} shards moved; tier/own on trt-n2 {mem_ratio};"
      f" finished {ok}; other recoveries {others}; final params vs uninterrupted: {equal}")
PY
  # Such a failure struck four rounds (2026-11-26, 11-27): the tier's background mapping held the
  # mmap lock of a rank past the 2 s watchdog at step 1 (fixed, docs/checkpoint.md). Kept if it recurs.
  if [[ -f $run.unexpected ]]; then
    echo "  $s round $round: a recovery nobody caused; its first error lines (the run is kept in $run):"
    grep -m 8 -iE "error|timed out|timeout|verdict|failed" "$run.out" | cut -c1-300 | sed 's/^/    /'
    KEEP=1
  fi
}

for ((round = 0; round < reps; ++round)); do
  for s in $scenarios; do run_one "$s" "$round"; done
done
python3 - "$work" <<'PY'
import json, glob, statistics, sys
rows = [json.loads(open(f).read()) for f in sorted(glob.glob(sys.argv[1] + "/*.json"))]
print("# medians over rounds: fault -> first step, and the restore phase")
for s in ("spare", "shrink", "disk", "parity"):
    r = [x for x in rows if x["scenario"] == s]
    if not r: continue
    med = lambda k: statistics.median(x[k] for x in r)
    restore = statistics.median(x["phases"]["restore_s"] for x in r)
    print(f"{s:6}  {len(r)} runs  fault->first step {med('kill_to_first_step_s'):.2f} s  restore {restore:.3f} s"
          f"  sources {sorted(set(x['source'] for x in r))}"
          f"  other recoveries {sum(x['other_recoveries'] for x in r)}")
restore = lambda s: statistics.median(x["phases"]["restore_s"] for x in rows if x["scenario"] == s)
if any(x["scenario"] == "shrink" for x in rows) and any(x["scenario"] == "disk" for x in rows):
    print(f"# restore phase, 2 ranks resharding the same state: directory (cache dropped) {restore('disk'):.3f} s"
          f" / memory {restore('shrink'):.3f} s = {restore('disk') / restore('shrink'):.1f}x (goal >= 5x)")
for kind, goal in (("buddy copies", "2.1x"), ("parity, groups of 3", "1 + 1/2 + 0.1 = 1.6x")):
    mem = [x["tier_bytes_node2"] / x["own_shard_bytes_node2"] for x in rows
           if x["own_shard_bytes_node2"] and (x["scenario"] == "parity") == kind.startswith("parity")]
    if mem:
        print(f"# host memory of the tier per node / the node's own shard bytes, {kind}: {min(mem):.2f}x-{max(mem):.2f}x (goal <= {goal})")
PY
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)${KEEP:+; runs kept in $work}"
