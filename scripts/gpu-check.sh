#!/usr/bin/env bash
# Everything that needs a GPU, for a fresh single-GPU machine (CUDA 13, cmake, ninja, python3 with
# torch; no Debian development packages, no network), in two calls that fit one lease of 15
# minutes of device time, the machine's start included (docs/gpu-check.md has the exact command lines):
#   call 1, cold: every step (ctest -L gpu; kernels-bench and its PyTorch peer; ncu; compute-sanitizer;
#           nccl-bench, device checkpoints and the trainer, each beside its PyTorch peer)
#   call 2, warm (--keep): the device checkpoints again, with the 8 GiB one repeated
# Each call configures (Release, the GPU's own architecture) and builds, in one `ninja -k 0`, only
# what its steps need; a target that fails to build fails only the steps that need it. The report
# is rewritten after every step, so a call killed at its time limit still brings back every step
# that finished.
#
#   scripts/gpu-check.sh prepare [--carry DIR] [--limit-mib N] [--nccl-versions "2.28.9 ..."]
#       On a Debian 12 machine with apt and pip: the .debs the build needs (with a manifest), the
#       nanobind wheel of scripts/python-env.sh's pin, and nccl.h of the NCCL torch pins, into DIR
#       (default gpu-carry/, git-ignored); checks that it and the working tree fit in 64 MiB.
#   scripts/gpu-check.sh run [--call 1|2 | --steps LIST] [--out DIR] [--budget SECONDS] [knobs]
#       On the GPU machine. Output in DIR (--out, else $OUT, else ./gpu-check-out):
#       gpu-check-report.md and gpu-check-logs.tar.gz. Exit 0 only when every step passed.
#     --call 1|2          the plan's calls, each with its settings unless given: 1 = every step,
#                         --sanitize memcheck:kernels,racecheck:kernels --ckpt-big 0 --budget 450;
#                         2 = ckpt --keep --ckpt-big 8192 --ckpt-big-reps 3 --budget 270
#     --steps LIST        any of tests,kernels,ncu,sanitizer,nccl,ckpt,trainer (default: all)
#     --budget S          seconds for the whole command (default 450: call 1 of the plan, 50 s inside its timeout)
#     --kernel-sizes L    kernels-bench and its peer (default 64M,256M,1G); --kernel-iters N (20)
#     --ncu-size S        the size ncu profiles (default 256M)
#     --nccl-max S        nccl-bench and its peer up to S (default 256M)
#     --ckpt-sizes L      device checkpoints, MiB (default 1024); --ckpt-big MiB: where memory, disk
#                         and budget allow (default 8192; 0: never), --ckpt-big-reps N times (1)
#     --trainer-widths L  train-mlp --hidden widths (default "64 1000000"); --trainer-steps N (100)
#     --sanitize L        TOOL:TARGET,... TOOL memcheck, racecheck, initcheck or synccheck; TARGET
#                         kernels, ckpt or trainer (default memcheck:kernels,memcheck:ckpt,
#                         memcheck:trainer,racecheck:kernels); --sanitize-cap S per run (120)
#     --cuda-arch A       TRAINRT_CUDA_ARCHITECTURES (default: the GPU's compute capability, or 90)
#     --carry DIR --prefix DIR --build DIR --jobs N --nccl-root DIR --keep (reuse an earlier
#     run's prefix and build folder) --dry-run (print the plan, run nothing)
#     --no-gpu            the CPU self-test: everything up to the GPU steps (--targets "T ..." only)
#     --test-fake-steps "NAME:SECONDS[:TARGET+...],..."  TEST HOOK (self-test, with --no-gpu):
#                         steps that only sleep, under the same budget and target rules
#     --test-break-target T  TEST HOOK: CMake target T is made not to compile
# docs/gpu-check.md says more; tests/gpu_check/self_test.sh tests it without a GPU.
set -uo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
here=$repo/scripts/gpu_check
TRAVEL_LIMIT_MIB=64
ALL_STEPS=tests,kernels,ncu,sanitizer,nccl,ckpt,trainer
CALL1=$ALL_STEPS  # cold: everything once
CALL2=ckpt        # warm, right after (--keep): what call 1 leaves out
# shellcheck source=gpu_check/lib.sh
source "$here/lib.sh"
# shellcheck source=gpu_check/prepare.sh
source "$here/prepare.sh"
# shellcheck source=gpu_check/setup.sh
source "$here/setup.sh"
# shellcheck source=gpu_check/steps.sh
source "$here/steps.sh"

want() { [[ ,$steps, == *,$1,* ]]; }

# Knob values, each checked where it is read, naming the bad one.
check_sizes() { [[ $2 =~ ^[0-9]+[KMG]?(,[0-9]+[KMG]?)*$ ]] || die "$1 '$2' is not a list of sizes like 64M,256M,1G"; }
check_int() { [[ $2 =~ ^[0-9]+$ ]] && (($2 >= $3 && $2 <= $4)) || die "$1 '$2' is not a whole number in $3..$4"; }

# The plan's calls (docs/gpu-check.md): their steps and the settings that fit them into one lease,
# each applied unless the command line gives that knob itself.
call_preset() {
  local -A given=()
  local a
  for a in "$@"; do [[ $a == --* ]] && given[$a]=1; done
  case $call in
    1) [[ -n ${given[--steps]:-} ]] || steps=$CALL1
       [[ -n ${given[--sanitize]:-} ]] || sanitize=memcheck:kernels,racecheck:kernels
       [[ -n ${given[--ckpt-big]:-} ]] || ckpt_big=0
       [[ -n ${given[--budget]:-} ]] || budget=450 ;;
    2) [[ -n ${given[--steps]:-} ]] || steps=$CALL2
       keep=1
       [[ -n ${given[--ckpt-big]:-} ]] || ckpt_big=8192
       [[ -n ${given[--ckpt-big-reps]:-} ]] || ckpt_big_reps=3
       [[ -n ${given[--budget]:-} ]] || budget=270 ;;
  esac
}

parse_run() {
  local args=("$@")
  call=""
  while (($#)); do
    [[ $1 == --no-gpu || $1 == --keep || $1 == --dry-run || $# -ge 2 ]] || die "run: $1 needs a value"
    case $1 in
      --call)
        [[ $2 == 1 || $2 == 2 ]] || die "--call '$2': the plan has calls 1 and 2"
        call=$2; shift 2 ;;
      --steps) steps=$2; shift 2 ;;
      --out) out=$2; shift 2 ;;
      --carry) carry=$2; shift 2 ;;
      --prefix) prefix=$2; shift 2 ;;
      --build) build=$2; shift 2 ;;
      --jobs) jobs=$2; shift 2 ;;
      --budget) budget=$2; shift 2 ;;
      --targets) targets=$2; shift 2 ;;
      --nccl-root) nccl_root=$2; shift 2 ;;
      --cuda-arch) cuda_arch=$2; shift 2 ;;
      --kernel-sizes) kernel_sizes=$2; shift 2 ;;
      --kernel-iters) kernel_iters=$2; shift 2 ;;
      --ncu-size) ncu_size=$2; shift 2 ;;
      --nccl-max) nccl_max=$2; shift 2 ;;
      --ckpt-sizes) ckpt_sizes=$2; shift 2 ;;
      --ckpt-big) ckpt_big=$2; shift 2 ;;
      --ckpt-big-reps) ckpt_big_reps=$2; shift 2 ;;
      --trainer-widths) trainer_widths=${2//,/ }; shift 2 ;;
      --trainer-steps) trainer_steps=$2; shift 2 ;;
      --sanitize) sanitize=$2; shift 2 ;;
      --sanitize-cap) sanitize_cap=$2; shift 2 ;;
      --test-fake-steps) IFS=, read -r -a fake_steps <<<"$2"; shift 2 ;;
      --test-break-target) test_break_target=$2; shift 2 ;;
      --no-gpu) no_gpu=1; shift ;;
      --keep) keep=1; shift ;;
      --dry-run) dry_run=1; shift ;;
      *) die "run: unknown argument '$1' (see the top of scripts/gpu-check.sh)" ;;
    esac
  done
  call_preset "${args[@]}"
  local st e w
  for st in ${steps//,/ }; do [[ ,$ALL_STEPS, == *,$st,* ]] || die "--steps: '$st' is none of $ALL_STEPS"; done
  check_int --budget "$budget" 10 100000
  check_int --jobs "$jobs" 1 1024
  check_sizes --kernel-sizes "$kernel_sizes"
  check_int --kernel-iters "$kernel_iters" 1 1000
  check_sizes --ncu-size "$ncu_size"
  [[ $ncu_size != *,* ]] || die "--ncu-size '$ncu_size': one size"
  check_sizes --nccl-max "$nccl_max"
  [[ $nccl_max != *,* ]] || die "--nccl-max '$nccl_max': one size"
  [[ $ckpt_sizes =~ ^[0-9]+(,[0-9]+)*$ ]] || die "--ckpt-sizes '$ckpt_sizes' is not a list of MiB like 1024,2048"
  check_int --ckpt-big "$ckpt_big" 0 1048576
  check_int --ckpt-big-reps "$ckpt_big_reps" 1 5
  for w in $trainer_widths; do check_int "--trainer-widths: width" "$w" 1 1048576; done
  [[ -n ${trainer_widths// /} ]] || die "--trainer-widths: no width"
  check_int --trainer-steps "$trainer_steps" 1 100000
  check_int --sanitize-cap "$sanitize_cap" 10 600
  for e in ${sanitize//,/ }; do
    [[ ${e%%:*} =~ ^(memcheck|racecheck|initcheck|synccheck)$ && -n ${SANITIZE_TARGET[${e#*:}]:-} && $e == *:* ]] ||
      die "--sanitize: '$e' is not TOOL:TARGET (TOOL memcheck, racecheck, initcheck or synccheck; TARGET kernels, ckpt or trainer)"
  done
  [[ $cuda_arch == auto || $cuda_arch =~ ^([1-9][0-9]+[af]?(-real|-virtual)?|native)$ ]] ||
    die "--cuda-arch '$cuda_arch' is not an architecture like 90, 90a or native"
  for e in "${fake_steps[@]}"; do
    [[ $e =~ ^[a-z0-9._-]+:[0-9]+(:[A-Za-z0-9_./+-]+)?$ ]] || die "--test-fake-steps: '$e' is not NAME:SECONDS[:TARGET+TARGET]"
  done
  ((${#fake_steps[@]} == 0 || no_gpu)) || die "--test-fake-steps is a test hook of the CPU self-test: only with --no-gpu"
  ((${#fake_steps[@]} == 0)) || steps=""  # the fake steps replace the real ones
  [[ $prefix == / || -z $prefix ]] && die "the prefix must not be / (the carried packages never go into the system)"
  [[ $(uname -m) == x86_64 ]] || die "the carried .debs are amd64; this machine is $(uname -m)"
  return 0
}

run() {
  carry=$repo/gpu-carry prefix=/opt/trainrt-deps build=$repo/build-gpu-check out=${OUT:-$repo/gpu-check-out}
  jobs=$(nproc) budget=450 no_gpu=0 targets="" nccl_root="" gpu_line="" driver="" keep=0 dry_run=0 steps=$ALL_STEPS
  cuda_arch=auto kernel_sizes=64M,256M,1G kernel_iters=20 ncu_size=256M nccl_max=256M ckpt_sizes=1024 ckpt_big=8192 ckpt_big_reps=1
  trainer_widths="64 1000000" trainer_steps=100 sanitize_cap=120 test_break_target="" fake_steps=()
  sanitize=memcheck:kernels,memcheck:ckpt,memcheck:trainer,racecheck:kernels
  tools_line="" nccl_line="" nanobind_line="" nb_site="" nccl_lib="" nccl_include="" built_targets=()
  parse_run "$@"
  if ((dry_run)); then
    say "plan: steps ${steps//,/ }; budget $budget s; kernels $kernel_sizes x $kernel_iters; ncu $ncu_size; nccl to $nccl_max;" \
      "ckpt $ckpt_sizes MiB ($( ((ckpt_big)) && echo "+$ckpt_big x $ckpt_big_reps where it fits" || echo "no big one")); trainer $trainer_widths x $trainer_steps; sanitize $sanitize" \
      "(each at most $sanitize_cap s); out $out"
    return 0
  fi
  mkdir -p "$out" || die "cannot create $out"
  out=$(cd "$out" && pwd)
  logs=$(mktemp -d /tmp/gpu-check-logs.XXXXXX)/logs && mkdir -p "$logs" || die "no temporary folder for the logs"
  # Every log is in the archive in the output folder by the time the run ends (die included).
  trap 'rm -rf "${logs%/logs}"' EXIT
  reporting=1  # from here on, every row and every die rewrites the report
  ((no_gpu)) || require_gpu
  preflight
  export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}  # one machine: keep NCCL off other interfaces
  # NCCL's own account of init into files that travel in the logs archive (stdout stays clean for
  # the greps): an init failure in this VM must come back with its reason, not only its code.
  export NCCL_DEBUG=${NCCL_DEBUG:-INFO} NCCL_DEBUG_SUBSYS=${NCCL_DEBUG_SUBSYS:-INIT,ENV} \
    NCCL_DEBUG_FILE=${NCCL_DEBUG_FILE:-$logs/nccl-%h-%p.log}
  unpack_carry
  pins
  if ! configure; then
    write_report final
    exit 1
  fi
  local want_targets=() e
  if ((no_gpu)) && ((${#fake_steps[@]} == 0)); then
    read -r -a want_targets <<<"$targets"
  else
    read -r -a want_targets <<<"$(step_targets)"
  fi
  if ((${#want_targets[@]})); then build_all "${want_targets[@]}"
  elif ((no_gpu)) && [[ -z $targets ]] && ((${#fake_steps[@]} == 0)); then build_all all
  fi
  if ((${#fake_steps[@]})); then
    for e in "${fake_steps[@]}"; do step_fake "$e"; done
  elif ((!no_gpu)); then
    want tests && step_tests
    want kernels && step_kernels
    want ncu && step_ncu
    want sanitizer && step_sanitizer
    want nccl && step_nccl
    want ckpt && step_ckpt
    want trainer && step_trainer
    want ckpt && step_ckpt_big
  fi
  write_report final
  ((failed)) && { say "FAILED (see the report)"; exit 1; }
  ((no_gpu)) && say "the steps before the GPU ones passed (--no-gpu: nothing ran on a GPU)" || say "all passed"
}

case ${1:-} in
  prepare) shift; prepare "$@" ;;
  run) shift; run "$@" ;;
  gpu-targets) build=$(cd "${2:?gpu-targets BUILD_DIR}" && pwd) && gpu_test_targets ;;  # for the self-test
  *) sed -n '2,/^set -uo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
