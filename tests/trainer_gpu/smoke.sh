#!/usr/bin/env bash
# Proves what benchmarks/trainer_gpu.sh and benchmarks/train_mlp_torch.py do, never their speed.
#   smoke.sh gpu-or-skip BUILD   trainer_gpu.sh at a tiny step count: without a GPU it must say
#                                "# no CUDA device: ... not measured" and exit 77 (this exits 77:
#                                SKIPPED); with one it must run and print every row and ratio
#   smoke.sh cpu-path BUILD      trainer_gpu.sh --devices cpu (train-mlp --device cpu and PyTorch on
#                                the CPU under /usr/bin/python3): the same runs and summary must come
#                                out; bad arguments and a build without train-mlp must fail (not 77)
#   smoke.sh torch-cpu           train_mlp_torch.py --device cpu for a few steps under /usr/bin/python3
# Exit 77 only where the thing needed is absent (a GPU; torch for /usr/bin/python3), saying which.
set -u
mode=$1 build=${2:-}
src=$(cd "$(dirname "$0")/../.." && pwd)
bench=$src/benchmarks/trainer_gpu.sh
work=$(mktemp -d /tmp/trainer-gpu-smoke.XXXXXX)
trap 'rm -rf "$work"' EXIT
failures=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
has() { grep -qE -- "$1" <<<"$2"; }
re() { local r=${1//(/\\(}; echo "${r//)/\\)}"; }  # a run's label as an extended regex
py=/usr/bin/python3
torch_ok() { [[ -x $py ]] && "$py" -c 'import torch' 2>/dev/null; }

case $mode in
  gpu-or-skip)
    out=$(bash "$bench" --build "$build" --out "$work/o" --steps 3 --warmup 2 --cpu-steps 1 --hidden 64,96 2>&1)
    rc=$?
    echo "$out"
    if [[ $rc -eq 77 ]]; then
      if has '^# no CUDA device: .*not measured$' "$out" && [[ $(wc -l <<<"$out") -eq 1 ]]; then
        echo "SKIPPED: no GPU here (trainer_gpu.sh said so in one line, exit 77)"
        exit 77
      fi
      fail "exit 77 without exactly one '# no CUDA device: ... not measured' line"
    elif [[ $rc -ne 0 ]]; then
      fail "trainer_gpu.sh exited $rc on a machine with a GPU"
    else
      for h in 64 96; do
        for run in "train-mlp cuda" "train-mlp cpu" "torch cuda" "torch cuda DDP(1)"; do
          has "^ +$h +[0-9.]+M +$(re "$run") +[0-9]+ +[0-9.]+ " "$out" && pass "hidden $h: a $run row" || fail "hidden $h: no $run row"
        done
      done
      has "step time: train-mlp cuda / train-mlp cpu [0-9.]+ .*train-mlp cuda / torch cuda [0-9.]+" "$out" \
        && pass "the cuda/cpu and train-mlp/torch ratios" || fail "no ratio line"
      [[ -s $work/o/train-mlp-cuda-h64/metrics_rank0.jsonl ]] && pass "metrics kept in --out" || fail "no metrics in --out"
    fi ;;
  cpu-path)
    # Mistakes fail (2, or 1 for a build without train-mlp), never skip.
    bash "$bench" --build "$build" --out "$work/x" --steps 0 >/dev/null 2>&1; rc=$?
    [[ $rc -eq 2 ]] && pass "--steps 0 is refused (exit 2)" || fail "--steps 0 gave exit $rc, want 2"
    bash "$bench" --build "$build" --out "$work/x" --hidden 2000000 >/dev/null 2>&1; rc=$?
    [[ $rc -eq 2 ]] && pass "--hidden 2000000 is refused (exit 2)" || fail "--hidden 2000000 gave exit $rc, want 2"
    bash "$bench" --build "$work/none" --out "$work/x" >/dev/null 2>&1; rc=$?
    [[ $rc -eq 1 ]] && pass "a build without train-mlp fails (exit 1)" || fail "a build without train-mlp gave exit $rc, want 1"
    mkdir -p "$work/tmp"  # its checkpoints' temporary folder goes here, and must be gone after
    out=$(TMPDIR=$work/tmp PYTHON=$py bash "$bench" --build "$build" --out "$work/o" --devices cpu --hidden 64,96 \
      --steps 6 --warmup 2 --ckpt-every 2 2>&1)
    rc=$?
    echo "$out"
    if [[ $rc -eq 77 ]] && ! torch_ok; then
      echo "SKIPPED: $py has no torch (python3-torch): the PyTorch half of the cpu path cannot run"
      exit 77
    fi
    [[ $rc -eq 0 ]] && pass "trainer_gpu.sh --devices cpu exited 0" || fail "trainer_gpu.sh --devices cpu exited $rc"
    for h in 64 96; do
      for run in "train-mlp cpu" "torch cpu" "torch cpu DDP(1)"; do
        has "^ +$h +[0-9.]+M +$(re "$run") +6 +[0-9.]+ +[0-9.]+ +[0-9]+ " "$out" && pass "hidden $h: a $run row of 6 steps" \
          || fail "hidden $h: no $run row of 6 steps"
      done
    done
    has "step time: train-mlp cpu / torch cpu [0-9.]+ \((train-mlp|torch) cpu [0-9.]+x faster\)" "$out" \
      && pass "the train-mlp/torch ratio" || fail "no train-mlp/torch ratio"
    # Steps 4, 6 and 8 of the timed 3..8 save (every 2); the stall comes from the kept metrics file.
    has "checkpoint \(train-mlp cpu, every 2\): 3 saves in the timed steps, stall median [0-9.]+ ms" "$out" \
      && pass "the checkpoint stall of 3 saves" || fail "no checkpoint stall line for 3 saves"
    [[ -s $work/o/train-mlp-cpu-h96/metrics_rank0.jsonl && -s $work/o/summary.json && -s $work/o/summary.txt ]] \
      && pass "metrics, summary.txt and summary.json in --out" || fail "--out lacks the metrics or the summaries"
    [[ -z $(find "$work/tmp" "$work/o" -name 'step_*' -o -name '*.shard' -o -name 'trainer-gpu.*') ]] \
      && pass "no checkpoint left behind" || fail "checkpoints left: $(find "$work/tmp" -mindepth 1 | head -3)" ;;
  torch-cpu)
    torch_ok || { echo "SKIPPED: $py cannot import torch (apt-get install python3-torch)"; exit 77; }
    out=$("$py" "$src/benchmarks/train_mlp_torch.py" --device cpu --hidden 64,96 --steps 4 --warmup 1 --ddp 2>&1)
    rc=$?
    echo "$out"
    [[ $rc -eq 0 ]] && pass "train_mlp_torch.py --device cpu exited 0" || fail "train_mlp_torch.py exited $rc"
    n=$(grep -cE '^RESULT \{.*"steps": 4, "median_s": [0-9.e-]+, "p90_s": [0-9.e-]+' <<<"$out")
    [[ $n -eq 4 ]] && pass "4 RESULT lines (2 widths, plain and DDP) of 4 steps" || fail "$n RESULT lines of 4 steps, want 4"
    has 'median +[0-9.]+ ms +p90 +[0-9.]+ ms +[0-9]+ samples/s' "$out" && pass "step time and samples/s printed" \
      || fail "no step time / samples/s line"
    "$py" "$src/benchmarks/train_mlp_torch.py" --device cpu --hidden 0 >/dev/null 2>&1; rc=$?
    [[ $rc -eq 2 ]] && pass "--hidden 0 is refused (exit 2)" || fail "--hidden 0 gave exit $rc, want 2" ;;
  *) echo "usage: smoke.sh gpu-or-skip BUILD | cpu-path BUILD | torch-cpu"; exit 2 ;;
esac
[[ $failures -eq 0 ]] && echo "all passed" || { echo "$failures failure(s)"; exit 1; }
