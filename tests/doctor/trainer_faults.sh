#!/bin/bash
# The doctor on real runs of the example trainer under mpirun (4 ranks, cpu): a healthy run exits
# 0; a rank stalled past the collective timeout is named as never arrived and the others as
# waiting; a killed rank is named as the peer that failed. Usage: trainer_faults.sh MPIRUN TRAINER DOCTOR
set -u
mpirun=$1 trainer=$2 doctor=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
run() {  # run NAME [trainer args...]
  local name=$1; shift
  timeout 120 "$mpirun" --allow-run-as-root --oversubscribe -np 4 "$trainer" --steps 20 --device cpu --watchdog 3 \
    --ckpt-dir "$tmp/$name/ckpt" --out "$tmp/$name/out" "$@" > "$tmp/$name.log" 2>&1
}
expect() {  # expect NAME RC PATTERN...
  local name=$1 rc=$2; shift 2
  local out; out=$("$doctor" "$tmp/$name/out"); local got=$?
  echo "== $name: exit $got"; echo "$out"
  [[ $got -eq $rc ]] || { echo "FAIL: $name: doctor exit $got, expected $rc"; fail=1; }
  for p in "$@"; do grep -qE -- "$p" <<< "$out" || { echo "FAIL: $name: no /$p/"; fail=1; }; done
}
run healthy && expect healthy 0 '^verdict: healthy'
# The trainer's state is replicated: a rerun on fewer nodes can restore it.
out=$("$doctor" --can-shrink "$tmp/healthy/ckpt"); rc=$?; echo "can-shrink: $out (exit $rc)"
[[ $rc -eq 0 && $out == *"a smaller world can restore it"* ]] || { echo "FAIL: --can-shrink"; fail=1; }
run stall --fault stall:3:8:30
expect stall 1 '^verdict: hang' '^collective: #8 allreduce\(grads\)' '^never arrived: rank 3 ' '^waited: rank 0 .* for 3\.0 s'
run kill --fault kill:2:6
expect kill 1 '^verdict: failure: peer failure at collective #6' '^never arrived: rank 2 '
# A rank slowed on purpose (the trainer's slow:RANK:STEP:SECONDS fault, once it has one).
if "$trainer" --help 2>&1 | grep -q 'slow:RANK'; then
  run slow --fault slow:1:1:0.02 --straggler-every 10
  expect slow 1 '^verdict: stragglers' '^straggler: rank 1 '
  grep -q '"event":"stragglers".*"rank":1' "$tmp/slow/out/metrics_rank0.jsonl" \
    || { echo "FAIL: rank 0's metrics have no stragglers event naming rank 1"; fail=1; }
else
  echo "NOTE: straggler case not run: this train-mlp has no slow:RANK:STEP:SECONDS fault (docs/doctor.md)"
fi
exit $fail
