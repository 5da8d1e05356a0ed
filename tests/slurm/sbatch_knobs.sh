#!/usr/bin/env bash
# train.sbatch's front door: every bad knob is refused before anything runs (exit 2, a message
# naming the knob and the value, no run folder, no srun), including the values bash arithmetic
# reads wrongly (010 as 8, 08 not at all), which used to switch limits off quietly. Runs the
# script as Slurm would start it (the job's variables set), with no cluster: the front door needs
# only `scontrol show hostnames`, which reads a slurm.conf and asks no daemon.
# Usage: sbatch_knobs.sh SOURCE_DIR
set -uo pipefail
src=$1
command -v scontrol >/dev/null || { echo "SKIPPED: no scontrol"; exit 77; }
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
printf 'ClusterName=knobs\nSlurmctldHost=localhost\nNodeName=trt-n[1-3] CPUs=2\nPartitionName=p Nodes=trt-n[1-3]\n' >"$d/slurm.conf"
fail=0
# refused NAME=VALUE... -- WANTED_TEXT: the script exits 2 naming it, and leaves nothing behind.
refused() {
  local vars=() want out rc
  while [[ $1 != -- ]]; do vars+=("$1"); shift; done
  want=$2
  out=$(cd "$d" && env -i PATH="$PATH" SLURM_CONF="$d/slurm.conf" SLURM_JOB_ID=7 SLURM_JOB_NODELIST="trt-n[1-3]" \
        SLURM_SUBMIT_DIR="$d" SLURM_NTASKS=6 SLURM_NTASKS_PER_NODE=2 TRAINER=/bin/true DOCTOR=/bin/false \
        "${vars[@]}" bash "$src/slurm_examples/train.sbatch" --memory-tier 2>&1)
  rc=$?
  if [[ $rc -eq 2 && $out == *"$want"* && ! -e $d/run-7 ]]; then
    echo "PASS ${vars[*]}: refused: $out"
  else
    echo "FAIL ${vars[*]}: exit $rc, wanted 2 and '$want', got: $out"; fail=1
  fi
}
refused TRAINRT_SPARES=08 -- "TRAINRT_SPARES='08' must be a whole number"
refused TRAINRT_SPARES=010 -- "TRAINRT_SPARES='010' must be a whole number"
refused TRAINRT_SPARES=-1 -- "TRAINRT_SPARES='-1'"
refused TRAINRT_SPARES=one -- "TRAINRT_SPARES='one'"
refused TRAINRT_SPARES=3 -- "TRAINRT_SPARES='3' must be a number below the 3 nodes"
refused MAX_EXCLUDED=08 -- "MAX_EXCLUDED='08' must be a whole number"
refused MAX_EXCLUDED=abc -- "MAX_EXCLUDED='abc'"
refused MAX_RERUNS=-1 -- "MAX_RERUNS='-1'"
refused MAX_RERUNS=1x -- "MAX_RERUNS='1x'"
refused TRAINRT_DRAIN=yes -- "TRAINRT_DRAIN='yes' must be 0"
refused STEP_END_WAIT=08 -- "STEP_END_WAIT='08' must be whole seconds"
refused STEP_END_WAIT=0 -- "STEP_END_WAIT='0'"
refused STEP_END_WAIT=3601 -- "STEP_END_WAIT='3601'"
# With spares every node runs the same number of ranks: 7 tasks on 3 nodes do not divide.
refused TRAINRT_SPARES=1 SLURM_NTASKS=7 SLURM_NTASKS_PER_NODE= -- "7 tasks do not divide among 3 nodes"
exit $fail
