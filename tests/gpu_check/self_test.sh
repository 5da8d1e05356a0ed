#!/usr/bin/env bash
# The parts of scripts/gpu-check.sh that need no GPU, on this (Debian, CPU-only) machine:
#  1. `prepare` downloads every carried package with a manifest (and the nanobind wheel, nccl.h)
#     and checks what travels against the 64 MiB limit (and a 1 MiB limit must fail);
#  2. `run` without --no-gpu fails at once, saying there is no GPU, before building anything;
#  3. `run --no-gpu` unpacks the .debs into a temporary prefix, configures exactly as on the GPU
#     machine and builds objects that use every carried package (hwloc, pugixml, fmt,
#     nlohmann-json, CLI11, xxhash, Catch2) and one program linked against the carried libraries;
#     `run --keep` reuses both; the list of programs the GPU run builds first is complete;
#  4. carried_deps.py proves that build read no header and linked no library of this machine's
#     Debian packages beyond the compiler's and the C library's: the carried set is complete;
#  5. and the proof can fail: with libpugixml-dev left out of the carry, the build silently takes
#     this machine's pugixml, and carried_deps.py names libpugixml-dev.
# Usage: self_test.sh [--full]   (--full builds the whole tree, not a subset: ~20 min on 2 cores)
# Exit 77 where it cannot run: not Debian (no dpkg/apt-get), no network for apt-get or pip
# download, no CUDA toolkit (nvcc), or a GPU present (then run the real `gpu-check.sh run`).
# The timing and failure rules (budget, broken target, kill, the plan's limits): rules_test.sh.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
check=$repo/scripts/gpu-check.sh
jobs=${GPU_CHECK_SELF_TEST_JOBS:-1}
full=0
[[ ${1:-} == --full ]] && full=1
for t in dpkg-query apt-get ninja cmake; do
  command -v "$t" >/dev/null || { echo "SKIPPED: $t is missing (the self-test needs a Debian machine with cmake and ninja)"; exit 77; }
done
command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]] || { echo "SKIPPED: no CUDA toolkit (nvcc): gpu-check configures with CUDA on"; exit 77; }
if nvidia-smi -L 2>/dev/null | grep -q "^GPU "; then echo "SKIPPED: a GPU is present: run scripts/gpu-check.sh run instead"; exit 77; fi

work=$(mktemp -d /tmp/gpu-check-self-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
failures=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $1"; shift; for l in "$@"; do echo "      $l"; done; failures=$((failures + 1)); }

# 1. prepare
out=$(bash "$check" prepare --carry "$work/carry" 2>&1); rc=$?
if [[ $rc -ne 0 ]] && grep -qE "apt-get download .* failed|pip download .* failed" <<<"$out"; then
  echo "SKIPPED: apt-get download failed (no network or no package lists): $(tail -2 <<<"$out")"; exit 77
fi
n=$(($(wc -l <"$work/carry/debs/MANIFEST.tsv" 2>/dev/null || echo 1) - 1))
if [[ $rc -eq 0 && $n -eq 14 ]] && grep -q "of 64 MiB" <<<"$out"; then pass "prepare: $n packages with a manifest; $(grep -o 'with the working tree.*' <<<"$out")"
else fail "prepare (exit $rc, $n packages)" "$out"; fi
out=$(bash "$check" prepare --carry "$work/small" --limit-mib 1 2>&1); rc=$?
if [[ $rc -ne 0 ]] && grep -q "is over 1 MiB" <<<"$out"; then pass "prepare refuses a carry over the limit (1 MiB here)"
else fail "prepare with --limit-mib 1 should fail (exit $rc)" "$out"; fi

# 2. no GPU: loud and early
t0=$SECONDS
out=$(bash "$check" run --carry "$work/carry" --prefix "$work/p0" --build "$work/b0" --out "$work/o0" 2>&1); rc=$?
if [[ $rc -ne 0 && ! -e $work/b0 ]] && grep -q "FAIL: no GPU" <<<"$out"; then
  pass "run without a GPU fails in $((SECONDS - t0)) s before building: $(head -c 90 <<<"$out")..."
else fail "run without a GPU (exit $rc)" "$out"; fi

# 3. run --no-gpu against the prefix only
objects() {  # one object per carried package, and trainrt-topo linked against the carried libraries
  echo trainrt-topo kernels/CMakeFiles/trainrt_kernels.dir/src/cpu_kernels.cpp.o \
       tests/topology/CMakeFiles/test_topology.dir/test_cpuset.cpp.o \
       slurm_examples/trainer/CMakeFiles/train-mlp.dir/goodput.cpp.o
}
targets=$(objects)
((full)) && targets=""
out=$(bash "$check" run --no-gpu --carry "$work/carry" --prefix "$work/prefix" --build "$work/build" --out "$work/out" \
      --jobs "$jobs" --budget 3000 --targets "$targets" 2>&1); rc=$?
if [[ $rc -eq 0 && -s $work/out/gpu-check-report.md && -s $work/out/gpu-check-logs.tar.gz ]] &&
   grep -q "configure: PASS" <<<"$out" && grep -q "build: PASS.*every program built finds its libraries" <<<"$out"; then
  pass "run --no-gpu: unpacked, configured (CUDA, NCCL on; Slurm, PMIx, Gloo off), built, report written"
else fail "run --no-gpu (exit $rc)" "$out" "$(tar -xOzf "$work/out/gpu-check-logs.tar.gz" logs/build.log 2>/dev/null | grep -m3 -B2 error)"; fi
# --keep: a second run on the same machine reuses the prefix and the build (what a second device
# call does when the first ran out of time).
out=$(bash "$check" run --no-gpu --keep --carry "$work/carry" --prefix "$work/prefix" --build "$work/build" \
      --out "$work/out-keep" --jobs "$jobs" --targets "$targets" 2>&1); rc=$?
if [[ $rc -eq 0 ]] && grep -q "unpack: PASS (--keep" <<<"$out" && grep -q "configure: PASS (--keep" <<<"$out" &&
   grep -q "build: PASS" <<<"$out"; then pass "run --keep reuses the prefix and the build folder"
else fail "run --keep (exit $rc)" "$out"; fi

# What the GPU run builds first: every program the GPU tests run, found before any is built.
want="slurm_examples/trainer/train-mlp tests/checkpoint/test_device_checkpoint tests/kernels/test_gpu_kernels benchmarks/ckpt-device-bench benchmarks/kernels-bench benchmarks/nccl-bench tests/runtime/nccl_mp"
got=$(bash "$check" gpu-targets "$work/build" 2>&1)
missing=$(for w in $want; do grep -qw -- "$w" <<<"$got" || echo "$w"; done)
if [[ -z $missing ]]; then pass "the GPU run builds first: $got"
else fail "gpu-targets misses: $missing" "$got"; fi
topo=$work/build/topology/trainrt-topo
# ldd's output is read whole first: `ldd | grep -q` under pipefail fails whenever grep's early exit
# gets ldd a SIGPIPE (it did once in CI, with both libraries found in the prefix).
libs=$(ldd "$topo" 2>&1)
if [[ -x $topo ]] && grep -q "libhwloc.so.15 => $work/prefix/" <<<"$libs" && grep -q "libpugixml.so.1 => $work/prefix/" <<<"$libs" &&
   "$topo" --help >/dev/null 2>&1; then
  pass "trainrt-topo loads libhwloc and libpugixml from the prefix and runs"
else fail "trainrt-topo from the prefix" "$(grep -E 'hwloc|pugixml|fmt|not found' <<<"$libs")"; fi

# 4. the carried set is complete
out=$(python3 "$repo/tests/gpu_check/carried_deps.py" "$work/build" "$work/prefix" "$repo" 2>&1); rc=$?
if [[ $rc -eq 0 ]]; then pass "$(grep -o 'carried_deps: [0-9]* headers.*' <<<"$out" | head -1)"
else fail "the build used packages gpu-check does not carry (exit $rc)" "$out"; fi

# 5. the proof can fail: leave libpugixml-dev out, and the build falls back to this machine's copy
mkdir -p "$work/partial/debs"
cp -r "$work/carry/CARRY.tsv" "$work/carry/wheels" "$work/carry/nccl" "$work/partial/"
cp "$work/carry/debs/"*.deb "$work/partial/debs/" && rm -f "$work/partial/debs/"libpugixml-dev_*.deb
grep -v "	libpugixml-dev	" "$work/carry/debs/MANIFEST.tsv" >"$work/partial/debs/MANIFEST.tsv"
bash "$check" run --no-gpu --carry "$work/partial" --prefix "$work/prefix2" --build "$work/build2" --out "$work/out2" \
  --jobs "$jobs" --budget 3000 --targets topology/CMakeFiles/trainrt_topology.dir/src/nccl_xml_loader.cpp.o >/dev/null 2>&1
out=$(python3 "$repo/tests/gpu_check/carried_deps.py" "$work/build2" "$work/prefix2" "$repo" 2>&1); rc=$?
if [[ $rc -eq 1 ]] && grep -q "NOT CARRIED libpugixml-dev" <<<"$out"; then
  pass "without libpugixml-dev in the carry, the check names it: $(grep -m1 'NOT CARRIED' <<<"$out" | cut -c1-110)..."
else fail "the check did not notice libpugixml-dev missing from the carry (exit $rc)" "$out"; fi

[[ $failures -eq 0 ]] && echo "all passed" || { echo "$failures failure(s)"; exit 1; }
