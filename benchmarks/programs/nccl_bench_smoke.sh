#!/usr/bin/env bash
# Runs an NCCL benchmark (nccl-bench, or python3 benchmarks/nccl_torch.py) at tiny sizes and proves
# its behaviour, never its speed:
#  - no GPU (exit 77): it must say "# no CUDA device: ... not measured" (or that torch, or its NCCL,
#    is missing) and nothing else counts as a skip; this script then exits 77 too (SKIPPED);
#  - a GPU (exit 0): every result checked, "# checked: N results, 0 wrong elements: OK" with N > 0,
#    and the same run with --corrupt (one element flipped after read-back) must exit 1, as nccl-tests.
# Any other exit status fails.
#   nccl_bench_smoke.sh PROGRAM [ARGS...]
set -u
args=(-b 8 -e 64K -f 64 -n 2 -w 1 -r 1)
out=$("$@" "${args[@]}" 2>&1)
rc=$?
echo "$out"
if [[ $rc -eq 77 ]]; then
  if grep -qE '^# (no CUDA device|no torch|no NCCL in torch): .*not measured' <<<"$out"; then
    echo "SKIPPED: no GPU here (said so, exit 77)"
    exit 77
  fi
  echo "FAIL: exit 77 without the '# no CUDA device: ... not measured' line"
  exit 1
fi
if [[ $rc -ne 0 ]]; then
  echo "FAIL: exit status $rc"
  exit 1
fi
if ! grep -qE '^# checked: [1-9][0-9]* results, 0 wrong elements: OK$' <<<"$out"; then
  echo "FAIL: exit 0 without a '# checked: N results, 0 wrong elements: OK' line"
  exit 1
fi
bad=$("$@" "${args[@]}" -t allgather -m blocking -d f32 -r 0 --corrupt 2>&1)
rc=$?
echo "$bad"
if [[ $rc -ne 1 ]] || ! grep -qE '^# checked: .* [1-9][0-9]* wrong elements: FAIL$' <<<"$bad"; then
  echo "FAIL: a corrupted result gave exit status $rc (want 1) or no FAIL line"
  exit 1
fi
echo "PASS: checked run OK; a corrupted result exits 1"
