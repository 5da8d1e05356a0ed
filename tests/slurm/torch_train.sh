#!/usr/bin/env bash
# slurm_examples/train_torch.py (PyTorch DDP on the trainrt module) on a 2-node local Slurm cluster,
# launched by srun --mpi=pmix --train-runtime: no MASTER_PORT, trainrt checkpoints, a rank killed
# mid-run and the rerun resuming bitwise, SIGUSR1 -> final checkpoint, exit 75, resume.
# Usage: torch_train.sh BUILD_DIR. Exit 77 (skipped) when not root (the daemons must run as root)
# or when the build has no trainrt Python module; a module that is built but fails to import fails.
set -uo pipefail
build=$(cd "$1" && pwd)
repo=$(cd "$(dirname "$0")/../.." && pwd)
cluster=$repo/slurm_examples/local-cluster/cluster.sh
script=$repo/slurm_examples/train_torch.py
py=/usr/bin/python3
if [[ $(id -u) -ne 0 ]]; then echo "SKIPPED: the local Slurm cluster needs root"; exit 77; fi
if ! compgen -G "$build/python/trainrt/_trainrt*.so" >/dev/null; then
  echo "SKIPPED: the trainrt Python module is not built in $build (configure with -DTRAINRT_WITH_PYTHON=ON)"; exit 77
fi
export PYTHONPATH=$build/python${PYTHONPATH:+:$PYTHONPATH}
if ! err=$("$py" -c 'import torch.distributed, trainrt.torch' 2>&1); then
  echo "FAIL: $py cannot import torch.distributed and trainrt.torch (Debian's python3-torch, the module in $build/python):"
  echo "$err" | tail -5; exit 1
fi

source "$repo/tests/slurm/harness.sh"
cluster_harness torch 6937 6938
# The nodes share this machine's hostname, which resolves to loopback: naming the data network is
# what lets Gloo (and trainrt's leaders and rank 0's store address) reach the other node.
export TRAINRT_IFNAME=eth0
unset MASTER_ADDR MASTER_PORT
bash "$cluster" start --mode live --nodes 2 >/dev/null 2>"$work/start.log" || { cat "$work/start.log"; exit 1; }
run() {  # run DIR ARGS...: 4 ranks on 2 nodes; exit code of srun
  local d=$1; shift
  timeout 300 bash "$cluster" run srun -N 2 -n 4 --mpi=pmix --kill-on-bad-exit=1 --train-runtime=policy=numa,bind=off \
    "$py" "$script" --ckpt-dir "$d/ckpt" --save-every 10 "$@" 2>&1 | grep -vE '^srun: job [0-9]+ (queued|has been)'
  return "${PIPESTATUS[0]}"
}
final() { grep -o "FINAL step [0-9]* loss [0-9.]* params [0-9a-f]*" | awk '{print $3, $7}'; }

# Uninterrupted reference.
out=$(run "$work/ref" --steps 120 --dump-params "$work/ref.bin"); rc=$?
ref=$(final <<<"$out")
if [[ $rc -eq 0 && -n $ref && -s $work/ref.bin ]] && grep -q "4 ranks, cpu (gloo)" <<<"$out" &&
   ! grep -q MASTER_PORT <<<"$out"; then
  pass "uninterrupted run, 4 ranks on 2 nodes, gloo over the session store: step/params $ref"
else fail "reference run (rc=$rc)" "$(tail -8 <<<"$out")"; fi

# Rank 3 (the second node) SIGKILLs itself after step 57: srun fails, the rerun resumes from step
# 50 (the last commit) and ends with the same bytes as the uninterrupted run.
out=$(run "$work/kill" --steps 120 --kill-at 57); rc=$?
if [[ $rc -ne 0 ]] && grep -q "rank 3 kills itself after step 57" <<<"$out" && ! grep -q FINAL <<<"$out"; then
  pass "rank 3 killed at step 57: srun exit $rc"
else fail "kill run (rc=$rc, want non-zero and the kill line)" "$(tail -6 <<<"$out")"; fi
out=$(run "$work/kill" --steps 120 --dump-params "$work/kill.bin"); rc=$?
got=$(final <<<"$out")
if [[ $rc -eq 0 ]] && grep -q "restored step 50 " <<<"$out" && [[ $got == "$ref" ]] && cmp -s "$work/ref.bin" "$work/kill.bin"; then
  pass "rerun restored step 50 and ended bitwise equal to the uninterrupted run ($(stat -c %s "$work/kill.bin") bytes)"
else fail "resume (rc=$rc, got '$got', want '$ref')" "$(grep -E 'restored|starting|FINAL|rror' <<<"$out" | head -8)"; fi

# SIGUSR1 (what --signal=B:USR1@T forwards): every rank stops after the same step, a final
# checkpoint, exit 75 (train.sbatch requeues on it), and the next run resumes from that step.
run "$work/usr1" --steps 100000000 >"$work/usr1.log" 2>&1 &
pid=$!
for _ in $(seq 1 600); do grep -q "step 50 loss" "$work/usr1.log" && break; sleep 0.1; done
jobid=$(bash "$cluster" run squeue -h -o %i | head -1)
bash "$cluster" run scancel --signal=USR1 "$jobid"
wait $pid; rc=$?
stopped=$(grep -o "stop signal at step [0-9]*" "$work/usr1.log" | awk '{print $5}')
again=""
[[ -n $stopped ]] && again=$(run "$work/usr1" --steps $((stopped + 5)))
if [[ $rc -eq 75 && -n $stopped ]] && grep -q "restored step $stopped " <<<"$again" &&
   grep -q "FINAL step $((stopped + 5)) " <<<"$again"; then
  pass "SIGUSR1: final checkpoint at step $stopped, exit 75, the next run resumed from it"
else fail "SIGUSR1 (rc=$rc, stopped at '$stopped')" "$(tail -4 "$work/usr1.log")" "$(grep -E 'restored|FINAL|rror' <<<"$again" | head -4)"; fi

# Through slurm_examples/train.sbatch, as a researcher submits it: TRAINER is the script (an
# executable, given the interpreter that imports torch and trainrt), which takes the --ckpt-dir and
# --out the template passes every trainer.
printf '#!/bin/sh\nexec %s %s "$@"\n' "$py" "$script" >"$work/train_torch"
chmod +x "$work/train_torch"
jobid=$(TRAINER=$work/train_torch RUN_DIR=$work/sbatch timeout 60 bash "$cluster" run sbatch --parsable -N 2 \
        --ntasks-per-node=2 --train-runtime=policy=numa,bind=off -o "$work/sbatch.out" "$repo/slurm_examples/train.sbatch" \
        --steps 30 --save-every 10)
for _ in $(seq 1 1500); do bash "$cluster" run squeue -h -j "$jobid" 2>/dev/null | grep -q . || break; sleep 0.2; done
out=$(cat "$work/sbatch.out" 2>/dev/null)
if grep -q 'FINAL step 30 ' <<<"$out" && grep -q '^training finished' <<<"$out" && [[ -d $work/sbatch/ckpt ]]; then
  pass "train.sbatch with TRAINER=train_torch.py: 4 ranks on 2 nodes trained to step 30 and finished"
else fail "train.sbatch with train_torch.py (job $jobid)" "$(tail -8 <<<"$out")"; fi

echo "torch train: $passed passed, $failed failed"
exit $((failed > 0))
