#!/usr/bin/env bash
# Kill and resume, one process, no Slurm: train-mlp --device DEVICE is killed (SIGKILL, --fault)
# at a few steps, rerun with the same arguments, and must end with final parameters byte-equal to
# an uninterrupted run's (--dump-params), FINAL line included.
#   resume_bitwise.sh TRAIN_MLP cpu|cuda [STEPS]
# Exit 77 only for cuda when `train-mlp --check-device` finds no CUDA device or no driver; any other
# failure to use the GPU fails the test.
set -uo pipefail
trainer=$1 device=$2 steps=${3:-60}
work=$(mktemp -d /tmp/trainer-resume.XXXXXX)
trap 'rm -rf "$work"' EXIT
failures=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $1"; shift; for l in "$@"; do echo "      $l"; done; failures=$((failures + 1)); }

if [[ $device == cuda ]]; then
  probe=$("$trainer" --check-device 2>&1); rc=$?
  if [[ $rc -eq 77 ]]; then echo "SKIPPED: $probe"; exit 77; fi
  [[ $rc -eq 0 ]] || { echo "FAIL: train-mlp --check-device exited $rc: $probe"; exit 1; }
fi
# --hidden 96: w2 and b1 are not multiples of 16 bytes long, so the cuda engine's padding is used.
run() { "$trainer" --device "$device" --steps "$steps" --ckpt-every 10 --hidden 96 --watchdog 60 "$@"; }
final() { grep -o "FINAL step [0-9]* loss [0-9.]* params [0-9a-f]*"; }

ref_out=$(run --ckpt-dir "$work/ref/c" --out "$work/ref/o" --dump-params "$work/ref/params.bin" 2>&1); rc=$?
ref=$(final <<<"$ref_out")
want_bytes=$(((32 * 96 + 2 * 96 + 1) * 4))
if [[ $rc -eq 0 && -n $ref && $(stat -c %s "$work/ref/params.bin" 2>/dev/null) == "$want_bytes" ]]; then
  pass "uninterrupted run on $device: $ref"
else fail "uninterrupted run (exit $rc)" "$(tail -5 <<<"$ref_out")"; exit 1; fi
if ! grep -q "device $device" <<<"$ref_out"; then fail "the run did not say it used device $device" "$(grep 'device' <<<"$ref_out")"; fi

# Step 7: before the first checkpoint (a fresh restart); 35: resumes from 30; the last step.
for at in 7 35 "$steps"; do
  d=$work/kill-$at
  out=$(run --ckpt-dir "$d/c" --out "$d/o" --dump-params "$d/params.bin" --fault "kill:0:$at" 2>&1); rc=$?
  again=$(run --ckpt-dir "$d/c" --out "$d/o" --dump-params "$d/params.bin" --fault "kill:0:$at" 2>&1); rc2=$?
  resumed=$(grep -oE "restored step [0-9]+|starting fresh" <<<"$again" | head -1)
  got=$(final <<<"$again")
  if [[ $rc -ne 0 && $rc2 -eq 0 && -n $resumed && $got == "$ref" ]] &&
     cmp -s "$work/ref/params.bin" "$d/params.bin"; then
    pass "killed at step $at (exit $rc), rerun: $resumed, final parameters byte-equal"
  else
    fail "kill at step $at (first exit $rc, rerun exit $rc2, '$resumed', got '$got', want '$ref')" \
      "$(tail -3 <<<"$out")" "$(tail -3 <<<"$again")" "$(cmp "$work/ref/params.bin" "$d/params.bin" 2>&1)"
  fi
done

# The comparison can fail: one step fewer gives other parameters.
out=$(run --steps $((steps - 1)) --ckpt-dir "$work/short/c" --out "$work/short/o" --dump-params "$work/short/params.bin" 2>&1)
if cmp -s "$work/ref/params.bin" "$work/short/params.bin"; then fail "a run one step shorter ended with the same parameters"
else pass "a run one step shorter ends with other parameters (the comparison is not vacuous)"; fi

[[ $failures -eq 0 ]] && echo "all passed" || { echo "$failures failure(s)"; exit 1; }
