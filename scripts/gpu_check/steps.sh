# gpu-check run's GPU steps (sourced by scripts/gpu-check.sh). Each checks that the programs it
# needs were built (else it fails alone, naming them), runs under the time budget and reports one
# row per program; a benchmark and its PyTorch peer always run in the same step.
# shellcheck shell=bash

# Every GPU test this tree registers; one missing means a part was silently left out. python.cuda
# too: an image that could not build the module must show as a failure, not as a GPU run that
# passed without the Python CUDA path.
EXPECTED_GPU_TESTS=(kernels.gpu_vs_cpu runtime.nccl.collectives.gpu runtime.nccl.timeout_abort.gpu
                    checkpoint.device_round_trip trainer.resume_bitwise.gpu python.cuda)

T_KERNELS_BENCH=benchmarks/kernels-bench
T_NCCL_BENCH=benchmarks/nccl-bench
T_CKPT_BENCH=benchmarks/ckpt-device-bench
T_TRAINER=slurm_examples/trainer/train-mlp
T_MODULE=_trainrt
# The sanitizer's targets (--sanitize TOOL:NAME): the kernel test, the device-checkpoint test, and a
# short trainer run fresh then resumed from its device checkpoint.
declare -A SANITIZE_TARGET=([kernels]=tests/kernels/test_gpu_kernels [ckpt]=tests/checkpoint/test_device_checkpoint
                            [trainer]=$T_TRAINER)

# The targets the chosen steps need, for the one build. Known only after configure (the tests').
step_targets() {
  local t=() e words=()
  if want tests; then read -r -a words <<<"$(gpu_test_targets)"; t+=("${words[@]}" "$T_MODULE"); fi
  { want kernels || want ncu; } && t+=("$T_KERNELS_BENCH")
  want nccl && t+=("$T_NCCL_BENCH")
  want ckpt && t+=("$T_CKPT_BENCH")
  want trainer && t+=("$T_TRAINER" "$T_MODULE")
  if want sanitizer; then for e in ${sanitize//,/ }; do t+=("${SANITIZE_TARGET[${e#*:}]}"); done; fi
  for e in "${fake_steps[@]}"; do IFS=: read -r _ _ e <<<"$e"; read -r -a words <<<"${e//+/ }"; t+=("${words[@]}"); done
  read -r -a words <<<"$targets"; t+=("${words[@]}")  # --targets: more, named by hand
  printf '%s\n' "${t[@]}" | awk 'NF && !seen[$0]++' | paste -sd' '
}

# PyTorch peers with their own libraries: nothing of the prefix on their library path.
torch_env=(env -u LD_LIBRARY_PATH PYTHONUNBUFFERED=1 python3 -u)

step_tests() {
  local t0=$SECONDS listed missing=() name left
  left=$(remaining)
  if ((left < 5)); then step_result gpu-tests "NOT RUN" 0 "time budget spent"; return; fi
  listed=$(ctest --test-dir "$build" -N -L '^gpu$' 2>&1)
  for name in "${EXPECTED_GPU_TESTS[@]}"; do grep -qE "Test +#[0-9]+: $name\$" <<<"$listed" || missing+=("$name"); done
  # A test whose program did not build fails here by itself ("Could not find executable"); the
  # others run.
  timeout -k 10 "$(cap_at 240)" ctest --test-dir "$build" -L '^gpu$' --output-on-failure --timeout 200 \
    --output-junit "$logs/gpu-tests.xml" >"$logs/gpu-tests.log" 2>&1
  local rc=$? n nfail nskip npass bad
  read -r n nfail nskip npass bad <<<"$(python3 "$repo/scripts/gpu_check/junit_counts.py" "$logs/gpu-tests.xml")"
  local absent=${missing[*]:+; not registered: ${missing[*]}}
  if [[ $rc -eq 0 && $nfail == 0 && $nskip == 0 && -z $absent && $n -ge ${#EXPECTED_GPU_TESTS[@]} ]]; then
    step_result gpu-tests PASS "$(elapsed "$t0")" "$npass of $n passed, 0 skipped"
  else
    step_result gpu-tests FAIL "$(elapsed "$t0")" "ctest exit $rc$(timed_out $rc && echo ' (cut by the time budget)'); $n run, $nfail failed, $nskip skipped ($bad)$absent"
  fi
}

step_kernels() {
  needs kernels-bench "$T_KERNELS_BENCH" &&
    run_timed kernels-bench kernels-bench.log 90 "$build/$T_KERNELS_BENCH" --gpu --sizes "$kernel_sizes" --iters "$kernel_iters"
  run_timed kernels-torch kernels-torch.log 120 "${torch_env[@]}" "$repo/benchmarks/kernels_torch.py" \
    --sizes "$kernel_sizes" --iters "$kernel_iters"
}

# Nsight Compute's DRAM throughput (% of the peak it knows) for every kernel launch of kernels-bench
# at one size, one row each in ncu-kernels.txt. --clock-control none: the clocks stay as the machine
# runs them, so the percentages are those of the timed runs.
step_ncu() {
  needs ncu "$T_KERNELS_BENCH" || return
  local ncu
  ncu=$(command -v ncu || echo "$cuda_root/bin/ncu")
  [[ -x $ncu ]] || { step_result ncu FAIL 0 "ncu not found (PATH, $cuda_root/bin)"; return; }
  run_timed ncu ncu-kernels.log 150 "$ncu" --clock-control none --csv --print-units base --log-file "$logs/ncu-kernels.csv" \
    --metrics dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes.sum,gpu__time_duration.sum \
    "$build/$T_KERNELS_BENCH" --gpu --sizes "$ncu_size" --iters 1 || return
  if python3 "$repo/scripts/gpu_check/ncu_table.py" "$logs/ncu-kernels.csv" >"$logs/ncu-kernels.txt"; then
    results[-1]+="; ncu-kernels.txt: $(($(wc -l <"$logs/ncu-kernels.txt") - 1)) kernel launches"
  else
    step_result ncu-table FAIL 0 "ncu's CSV could not be read: $(tail -1 "$logs/ncu-kernels.txt")"
  fi
  # The kernels that missed their goals on the first run (the norm; the copy kernel, whose odd-tensor
  # launches missed): speed of light, memory, occupancy and warp stalls, for the next change.
  run_timed ncu-detail ncu-detail.txt 120 "$ncu" --clock-control none --kernel-name regex:'norm_kernel|copy_kernel' \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats \
    --section SchedulerStats --section LaunchStats \
    "$build/$T_KERNELS_BENCH" --gpu --sizes "$ncu_size" --iters 1
}

# compute-sanitizer, one row per TOOL:TARGET of --sanitize, in that order, each at most
# --sanitize-cap seconds. --report-api-errors no: our code checks every CUDA call itself.
step_sanitizer() {
  local sanitizer entry tool what work cmd
  sanitizer=$(command -v compute-sanitizer || echo "$cuda_root/bin/compute-sanitizer")
  for entry in ${sanitize//,/ }; do
    tool=${entry%%:*} what=${entry#*:}
    needs "$tool $what" "${SANITIZE_TARGET[$what]}" || continue
    [[ -x $sanitizer ]] || { step_result "$tool $what" FAIL 0 "compute-sanitizer not found"; continue; }
    cmd=("$sanitizer" --tool "$tool" --error-exitcode 99 --print-limit 20 --report-api-errors no)
    case $what in
      # TRAINRT_GPU_TEST_SKIP_HUGE: the 2^31-element case checks indexing, not memory safety, and
      # takes minutes under a sanitizer; gpu-tests runs it without one.
      kernels) sanitize_one "$tool" kernels env TRAINRT_GPU_TEST_SKIP_HUGE=1 "${cmd[@]}" "$build/${SANITIZE_TARGET[kernels]}" ;;
      ckpt) sanitize_one "$tool" ckpt "${cmd[@]}" "$build/${SANITIZE_TARGET[ckpt]}" ;;
      trainer)
        work=$logs/sanitizer-$tool-trainer
        sanitize_one "$tool" trainer.fresh env NCCL_SOCKET_IFNAME=lo "${cmd[@]}" "$build/$T_TRAINER" --device cuda \
          --steps 8 --ckpt-every 4 --ckpt-dir "$work/c" --out "$work/o" &&
          sanitize_one "$tool" trainer.resume env NCCL_SOCKET_IFNAME=lo "${cmd[@]}" "$build/$T_TRAINER" --device cuda \
            --steps 12 --ckpt-every 4 --ckpt-dir "$work/c" --out "$work/o" ;;
    esac
  done
}

sanitize_one() {
  local tool=$1 name=$2 log=sanitizer-$1-$2.log summary; shift 2
  run_timed "$tool $name" "$log" "$sanitize_cap" "$@"
  local rc=$?
  summary=$(grep -oE 'ERROR SUMMARY: [0-9]+ error|RACECHECK SUMMARY: [0-9]+ hazard[s]?' "$logs/$log" 2>/dev/null | tail -1)
  [[ -n $summary ]] && results[-1]+="; $summary"
  return $rc
}

step_nccl() {
  needs nccl-bench "$T_NCCL_BENCH" &&
    run_timed nccl-bench nccl-bench.log 150 "$build/$T_NCCL_BENCH" -e "$nccl_max"
  run_timed nccl-torch nccl-torch.log 180 "${torch_env[@]}" "$repo/benchmarks/nccl_torch.py" -e "$nccl_max" \
    --runtime-log "$logs/nccl-bench.log"
}

# Device checkpoints on the machine's disk (the build folder's), not /tmp, which may be memory.
step_ckpt() {
  local dir=$build/ckpt-bench mib=${ckpt_sizes//,/ }
  needs ckpt-device-bench "$T_CKPT_BENCH" &&
    run_timed ckpt-device-bench ckpt-device-bench.log 150 "$build/$T_CKPT_BENCH" --dir "$dir" --sizes "$ckpt_sizes"
  # shellcheck disable=SC2086  # one argument per size
  run_timed ckpt-device-torch ckpt-device-torch.log 180 "${torch_env[@]}" "$repo/benchmarks/ckpt_torch.py" \
    --device cuda --dir "$dir" $mib
}

# The big checkpoint, last in its call and only where it fits: host memory for ckpt-device-bench's
# three pinned copies plus 2 GiB, the disk for two steps plus 1 GiB (its own rules,
# benchmarks/programs/ckpt_device_bench.cpp), and what is left of the budget. ckpt-device-bench
# repeats --ckpt-big-reps times (the 8 GiB restore's one sample missed its goal); the PyTorch
# peer once.
step_ckpt_big() {
  ((ckpt_big > 0)) || return 0
  local gib=$(((ckpt_big + 1023) / 1024)) avail disk dir=$build/ckpt-bench
  local bench_cap=$((60 + 40 * ckpt_big_reps)) need=$((90 + 40 * ckpt_big_reps))
  avail=$(awk '/MemAvailable/ {print int($2 / 1048576)}' /proc/meminfo)
  mkdir -p "$dir"
  disk=$(df -Pk "$dir" | awk 'NR == 2 {print int($4 / 1048576)}')
  if ((avail < 3 * gib + 2 || disk < 2 * gib + 1)); then
    step_result "ckpt ${ckpt_big} MiB" OMITTED 0 "$avail GiB of memory available, $disk GiB of disk free; needs $((3 * gib + 2)) and $((2 * gib + 1))"
    return 0
  fi
  if (($(remaining) < need)); then
    step_result "ckpt ${ckpt_big} MiB" OMITTED 0 "$(remaining) s of the budget left; $ckpt_big_reps repeat(s) and the peer take about $need"
    return 0
  fi
  needs ckpt-device-bench-big "$T_CKPT_BENCH" &&
    run_timed ckpt-device-bench-big ckpt-device-bench-big.log "$bench_cap" "$build/$T_CKPT_BENCH" --dir "$dir" \
      --sizes "$ckpt_big" --reps "$ckpt_big_reps"
  run_timed ckpt-device-torch-big ckpt-device-torch-big.log 150 "${torch_env[@]}" "$repo/benchmarks/ckpt_torch.py" \
    --device cuda --dir "$dir" --reps 1 "$ckpt_big"
}

step_trainer() {
  if needs trainer-gpu "$T_TRAINER"; then
    # CPU runs only at widths a CPU step is quick at: the comparison that matters is with PyTorch.
    run_timed trainer-gpu trainer-gpu.log 200 bash "$repo/benchmarks/trainer_gpu.sh" --build "$build" \
      --out "$logs/trainer-gpu" --hidden "$trainer_widths" --steps "$trainer_steps" --warmup 10 --cpu-max-hidden 4096
  fi
  # PyTorch through trainrt.torch: the NCCL process group, DDP on the GPU, CUDA tensors in the
  # module's checkpoints; 40 steps, then a rerun that must resume at 41. grep reads to the end
  # (not -q): a reader that leaves early broke the trainer's last print (BrokenPipeError, exit 141).
  needs torch-train "$T_MODULE" || return
  run_timed torch-train torch-train.log 150 bash -c '
    set -o pipefail; go() { PYTHONPATH=$1/python PYTHONUNBUFFERED=1 python3 "$2/slurm_examples/train_torch.py" \
      --device cuda --save-every 20 --ckpt-dir "$3/torch-train" --steps "$4"; }
    go "$1" "$2" "$3" 40 && go "$1" "$2" "$3" 60 | tee /dev/stderr | grep "steps 41\.\.60" >/dev/null' _ "$build" "$repo" "$logs"
}

# TEST HOOK (--test-fake-steps, tests/gpu_check/self_test.sh only): NAME:SECONDS[:TARGET+TARGET]
# sleeps SECONDS through the same target and budget rules as a real step.
step_fake() {
  local name secs targets
  IFS=: read -r name secs targets <<<"$1"
  # shellcheck disable=SC2086  # targets are words
  needs "$name" ${targets//+/ } && run_timed "$name" "fake-$name.log" 100000 bash -c 'echo "fake step (test hook)"; sleep "$1"' _ "$secs"
}
