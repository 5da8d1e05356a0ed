#!/usr/bin/env bash
# Finding the culprit on a real 2-node local Slurm cluster (docs/doctor.md): a rank stalled on node
# 2 is named with its node by trainrt-doctor; train.sbatch reruns without that node, on a smaller
# world, from the checkpoint; a rank slowed on purpose is named by rank 0's straggler line; and
# the per-node .prom files parse with prometheus_client's own parser.
# Usage: culprit.sh BUILD_DIR. Exit 77 (skipped) when not root.
set -uo pipefail
build=$(cd "$1" && pwd)
repo=$(cd "$(dirname "$0")/../.." && pwd)
cluster=$repo/slurm_examples/local-cluster/cluster.sh
trainer=$build/slurm_examples/trainer/train-mlp
doctor=$build/doctor/trainrt-doctor
if [[ $(id -u) -ne 0 ]]; then echo "SKIPPED: the local Slurm cluster needs root"; exit 77; fi
for f in "$trainer" "$doctor"; do [[ -x $f ]] || { echo "FAIL: $f is not built"; exit 1; }; done

source "$repo/tests/slurm/harness.sh"
cluster_harness culprit 7957 7958
bash "$cluster" start --mode live --nodes 2 >/dev/null 2>"$work/start.log" || { cat "$work/start.log"; exit 1; }
crun() { timeout 180 bash "$cluster" run "$@"; }
# -N 2 -n 4 places ranks in blocks: 0 and 1 on trt-n1, 2 and 3 on trt-n2, so a fault for rank 2
# hits node 2 (checked below from the rank's own start event). bind=off: both "nodes" share this
# machine's cores, and binding pins the two node leaders to one core (slurm_integration.sh).
run2() {
  crun srun -N 2 -n 4 --mpi=pmix --kill-on-bad-exit=1 --train-runtime=policy=numa,bind=off "$trainer" --device cpu "$@"
}
node_of() { sed -nE '1s/.*"node":"([^"]*)".*/\1/p' "$1/metrics_rank$2.jsonl" 2>/dev/null; }

# ---------------------------------------------------------------- (a) a rank stalled on node 2
d=$work/stall
run2 --steps 20 --ckpt-every 5 --watchdog 3 --ckpt-dir "$d/c" --out "$d/o" --fault stall:2:8:30 >"$work/stall.log" 2>&1
rc=$?
verdict=$("$doctor" "$d/o"); drc=$?
culprits=$("$doctor" "$d/o" --culprit-nodes)
echo "$verdict" | sed 's/^/  | /'
if [[ $rc -ne 0 && $(node_of "$d/o" 2) == trt-n2 && $drc -eq 1 ]] && grep -q '^verdict: hang' <<<"$verdict" &&
   [[ $(grep '^never arrived:' <<<"$verdict" | cut -d: -f2) == " rank 2 on trt-n2" && $culprits == trt-n2 ]]; then
  pass "a rank stalled on node 2: srun exit $rc, trainrt-doctor exit 1 names rank 2 on trt-n2 (and only it), exclude trt-n2"
else fail "stall on node 2 (srun rc=$rc, doctor rc=$drc, rank 2 on '$(node_of "$d/o" 2)', culprits '$culprits')" \
  "$(tail -6 "$work/stall.log")"; fi

# ------------------------------------- (a2) a rank stalled after its update: the others wait unnumbered
# The others wait in step 9's stop agreement, which the flight recorder does not number: their dumps
# say so ("unnumbered"), so their timeouts naming nobody do not make them laggards.
d=$work/stall_after
run2 --steps 20 --ckpt-every 5 --watchdog 3 --ckpt-dir "$d/c" --out "$d/o" --fault stall-after:2:8:30 >"$work/stall_after.log" 2>&1
rc=$?
verdict=$("$doctor" "$d/o"); drc=$?
culprits=$("$doctor" "$d/o" --culprit-nodes)
echo "$verdict" | sed 's/^/  | /'
if [[ $rc -ne 0 && $drc -eq 1 ]] && grep -q '^verdict: hang: hang at allreduce(stop agreement) after #8 ' <<<"$verdict" &&
   [[ $(grep '^never arrived:' <<<"$verdict" | cut -d: -f2) == " rank 2 on trt-n2" && $culprits == trt-n2 ]] &&
   grep -q '"unnumbered": "allreduce(stop agreement)"' "$d/o/flight_rank0.json"; then
  pass "a rank stalled after step 8's update on node 2: the others waited in the unnumbered stop agreement; trainrt-doctor names rank 2 on trt-n2 (and only it)"
else fail "stall after the update on node 2 (srun rc=$rc, doctor rc=$drc, culprits '$culprits')" \
  "$(tail -6 "$work/stall_after.log")" "$(head -14 "$d/o/flight_rank0.json" 2>/dev/null)"; fi

# ---------------------------------------------------------------- (b) train.sbatch drops node 2
# The template reads TRAINER, DOCTOR, RUN_DIR and MAX_RERUNS from the submitting environment.
export TRAINER=$trainer DOCTOR=$doctor RUN_DIR=$work/sbatch MAX_RERUNS=2
# --shard-optimizer: AdamW's moments are chunks of global tensors, which the smaller world reshards.
jobid=$(crun sbatch --parsable -N 2 --ntasks-per-node=2 --train-runtime=policy=numa,bind=off -o "$work/sbatch.out" \
        "$repo/slurm_examples/train.sbatch" --device cpu --shard-optimizer --steps 40 --ckpt-every 10 --watchdog 3 \
        --fault stall:2:25:30)
for _ in $(seq 1 900); do crun squeue -h -j "$jobid" 2>/dev/null | grep -q . || break; sleep 0.2; done
out=$(cat "$work/sbatch.out" 2>/dev/null)
grep -E '^(doctor: (verdict|never)|train.sbatch|step failed|training finished|train-mlp: [0-9]+ ranks)' <<<"$out" | sed 's/^/  | /'
if grep -q '^doctor: never arrived: rank 2 on trt-n2' <<<"$out" && grep -q 'rerunning without trt-n2' <<<"$out" &&
   grep -q 'train-mlp: 2 ranks, .* starting after step 20 ' <<<"$out" && grep -q '^FINAL step 40 ' <<<"$out" &&
   grep -q 'checkpoint: resharded 2 tensors' <<<"$out" &&
   grep -q '^training finished' <<<"$out" && [[ $(node_of "$RUN_DIR/out" 0) == trt-n1 ]] &&
   tail -1 "$RUN_DIR/out/metrics_rank0.jsonl" | grep -q '"event":"end"'; then
  pass "train.sbatch: rank 2 stalled on trt-n2, the doctor named it, the rerun left trt-n2 out (4 -> 2 ranks), resharded the sharded optimizer state, resumed after step 20 and finished"
else fail "train.sbatch exclusion (job $jobid)" "$(grep -vE '^step |checkpoint:' <<<"$out" | tail -25)"; fi

# ------------------------------------------------- (b2) a trainer option misspelt: no rerun, no node left out
# Every task exits 2 at once, the same on every node: rerunning or leaving nodes out cannot help.
RUN_DIR=$work/sbatch-usage
jobid=$(crun sbatch --parsable -N 2 --ntasks-per-node=2 --train-runtime=policy=numa,bind=off -o "$work/sbatch-usage.out" \
        "$repo/slurm_examples/train.sbatch" --device cpu --no-such-option 3)
for _ in $(seq 1 300); do crun squeue -h -j "$jobid" 2>/dev/null | grep -q . || break; sleep 0.2; done
out=$(cat "$work/sbatch-usage.out" 2>/dev/null)
if grep -q 'the trainer exited 2 (a usage error' <<<"$out" && ! grep -qE 'step failed|leaving out|replacing' <<<"$out" &&
   [[ -e $RUN_DIR/out/srun-1.err && ! -e $RUN_DIR/out/srun-2.err ]]; then
  pass "train.sbatch with a misspelt trainer option: the job ends after one step (exit 2), no rerun, no node left out"
else fail "train.sbatch usage error (job $jobid)" "$(tail -12 <<<"$out")"; fi
unset TRAINER DOCTOR RUN_DIR MAX_RERUNS

# ---------------------------------------------------------------- (c) a rank slowed on purpose
d=$work/slow
mkdir -p "$work/prom"  # node_exporter's textfile folder exists; the trainer does not create it
run2 --steps 20 --ckpt-every 5 --straggler-every 10 --fault slow:2:1:0.03 --ckpt-dir "$d/c" --out "$d/o" \
  --prom-file "$work/prom/train-%n.prom" >"$work/slow.log" 2>&1
rc=$?
lines=$(grep 'straggler(s) above the median' "$work/slow.log")
echo "$lines" | sed 's/^/  | /'
# Rank 2 is named first (slowest first) at both checks, with its node.
if [[ $rc -eq 0 && $(grep -c ': rank 2 on trt-n2 (' <<<"$lines") -eq 2 ]] &&
   [[ $(grep -cE '"event":"stragglers".*"ranks":\[\{"excess":[0-9.e+-]*,"node":"trt-n2","rank":2,' "$d/o/metrics_rank0.jsonl") -eq 2 ]]; then
  pass "a rank slowed by 30 ms a step on node 2: rank 0's straggler line and metrics name rank 2 on trt-n2 at steps 10 and 20"
else fail "straggler line (rc=$rc)" "${lines:-no straggler line}" "$(tail -4 "$work/slow.log")"; fi
verdict=$("$doctor" "$d/o"); drc=$?
if [[ $drc -eq 1 ]] && grep -q '^straggler: rank 2 on trt-n2' <<<"$verdict"; then
  pass "trainrt-doctor on the same run: stragglers, rank 2 on trt-n2 ($(grep -m1 '^straggler:' <<<"$verdict" | cut -d: -f3- | cut -c1-60))"
else fail "doctor on the slow run (exit $drc)" "$verdict"; fi

# ---------------------------------------------------------------- (d) the .prom files of that job
# Every metric name docs/doctor.md lists, with the labels job, step, node and rank, through
# prometheus_client's parser (Debian's, hence /usr/bin/python3).
if out=$(/usr/bin/python3 - "$work/prom" "$repo/docs/doctor.md" <<'PY' 2>&1
import os, re, sys
try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:
    sys.exit("prometheus_client is missing: apt-get install python3-prometheus-client (scripts/install-deps.sh)")
folder, doc = sys.argv[1], open(sys.argv[2], encoding="utf-8").read()
documented = sorted(set(re.findall(r"^\| `(trainrt_[a-z0-9_]+)`", doc, re.M)) |
                    set(re.findall(r"^\| `trainrt_[a-z0-9_]+`, `(trainrt_[a-z0-9_]+)`", doc, re.M)))
files = sorted(os.listdir(folder))
if files != ["train-trt-n1.prom", "train-trt-n2.prom"]:
    sys.exit(f"files: {files} (want one per node, no temporary left)")
problems, jobs = [], set()
for name, rank, node in (("train-trt-n1.prom", "0", "trt-n1"), ("train-trt-n2.prom", "2", "trt-n2")):
    families = {f.name: f for f in text_string_to_metric_families(open(os.path.join(folder, name)).read())}
    # The parser reports a counter under its name without _total.
    have = {f.name + ("_total" if f.type == "counter" else "") for f in families.values()}
    want = set(documented) - ({"trainrt_stragglers"} if rank != "0" else set())  # rank 0 alone counts stragglers
    if want - have: problems.append(f"{name}: missing {sorted(want - have)}")
    if have - set(documented): problems.append(f"{name}: undocumented {sorted(have - set(documented))}")
    for f in families.values():
        for s in f.samples:
            if set(s.labels) != {"job", "step", "node", "rank"} or s.labels["rank"] != rank or s.labels["node"] != node \
               or not s.labels["job"].isdigit() or s.labels["step"] != "0":
                problems.append(f"{name}: {s.name} labels {s.labels}")
            jobs.add(s.labels.get("job"))
    if families["trainrt_step"].samples[0].value != 20: problems.append(f"{name}: trainrt_step is not 20")
if len(jobs) != 1: problems.append(f"job labels differ: {jobs}")
print("\n".join(problems) if problems else
      f"{len(documented)} documented metrics in 2 files, labels job={jobs.pop()} step=0 node rank")
sys.exit(1 if problems else 0)
PY
); then pass ".prom per node parsed by prometheus_client: $out"
else fail ".prom files" "$out" "$(ls -la "$work/prom" 2>&1)"; fi

echo "culprit: $passed passed, $failed failed"
exit $((failed > 0))
