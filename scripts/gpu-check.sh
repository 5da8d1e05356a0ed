#!/usr/bin/env bash
# One command for a fresh single-GPU machine (CUDA 13, cmake, ninja, python3 with torch; no Debian
# development packages, no network): build with CUDA, run every GPU test (0 skipped), the kernel,
# NCCL and device-checkpoint benchmarks each beside its PyTorch peer, the trainer on the GPU (kill
# and bitwise resume, speed against PyTorch), ncu, and compute-sanitizer (memcheck, racecheck) over
# the trainer and the GPU test programs; one report file. Three calls of 10 minutes: docs/gpu-check.md.
#
#   scripts/gpu-check.sh prepare [--carry DIR] [--limit-mib N]
#       On a Debian 12 machine with apt: downloads the .deb files the build needs (below) into
#       DIR/debs (default gpu-carry/, git-ignored) with a manifest, and checks that they and the
#       working tree fit what travels to the GPU machine (64 MiB).
#   scripts/gpu-check.sh run [--out DIR] [--carry DIR] [--prefix DIR] [--build DIR] [--jobs N]
#                            [--budget SECONDS] [--no-gpu] [--targets "T1 T2 ..."] [--nccl-root DIR]
#                            [--steps tests,kernels,nccl,ckpt,trainer,ncu,sanitizer,rest] [--keep]
#       On the GPU machine: unpacks the carried .debs with dpkg -x into a prefix (default
#       /opt/trainrt-deps; never into /), configures against it, builds, runs the checks and writes
#       DIR/gpu-check-report.md (DIR: --out, else $OUT, else ./gpu-check-out) plus the full logs in
#       DIR/gpu-check-logs.tar.gz. Exit 0 only when every step passed and no test was skipped.
#       Without a GPU it fails at once, saying so. --no-gpu (the self-test on a CPU machine) runs
#       everything up to the GPU steps (only --targets, when given) and stops there. --steps runs
#       only some GPU steps (the report's verdict then names them);
#       --keep reuses the prefix and build folder of an earlier run on the same machine.
# docs/gpu-check.md says more; tests/gpu_check/self_test.sh tests the parts that need no GPU.
set -uo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
# What the build needs beyond a compiler, CMake, Ninja and the CUDA toolkit: the -dev packages
# (headers, CMake/pkg-config files), their shared libraries, what those need (libudev1 for hwloc)
# and pkg-config itself (pkgconf). Nothing of Slurm, PMIx or Gloo: those parts are OFF there.
CARRIED_PACKAGES=(libhwloc-dev libhwloc15 libudev1 libfmt-dev libfmt9 nlohmann-json3-dev libpugixml-dev
                  libpugixml1v5 libcli11-dev catch2 libxxhash-dev libxxhash0 pkgconf-bin libpkgconf3)
# Every GPU test this tree registers; one missing means a part was silently left out.
EXPECTED_GPU_TESTS=(kernels.gpu_vs_cpu runtime.nccl.collectives.gpu runtime.nccl.timeout_abort.gpu
                    checkpoint.device_round_trip trainer.resume_bitwise.gpu)
TRAVEL_LIMIT_MIB=64
ALL_STEPS=tests,kernels,nccl,ckpt,trainer,ncu,sanitizer,rest  # run's GPU steps, in order (--steps picks some);
# each benchmark step runs a program and its peer, so a comparison never spans two calls
MULTIARCH=x86_64-linux-gnu

die() { echo "gpu-check: FAIL: $*" >&2; exit 1; }
say() { echo "gpu-check: $*"; }

# ---------------------------------------------------------------------------------------- prepare
prepare() {
  local carry=$repo/gpu-carry limit=$TRAVEL_LIMIT_MIB
  while (($#)); do
    case $1 in
      --carry) carry=$2; shift 2 ;;
      --limit-mib) limit=$2; shift 2 ;;
      *) die "prepare: unknown argument '$1'" ;;
    esac
  done
  command -v apt-get >/dev/null || die "prepare needs apt-get (a Debian 12 machine like the CPU one)"
  fresh_dir "$carry/debs" .gpu-check-carry
  if ! (cd "$carry/debs" && apt-get download "${CARRIED_PACKAGES[@]}" >"$carry/download.log" 2>&1); then
    say "apt-get download failed; refreshing the package lists once"
    apt-get update -qq >/dev/null 2>&1
    (cd "$carry/debs" && apt-get download "${CARRIED_PACKAGES[@]}" >"$carry/download.log" 2>&1) ||
      die "apt-get download ${CARRIED_PACKAGES[*]} failed: $(tail -3 "$carry/download.log")"
  fi
  local manifest=$carry/debs/MANIFEST.tsv f
  printf 'file\tpackage\tversion\tarchitecture\tbytes\tsha256\n' >"$manifest"
  for f in "$carry"/debs/*.deb; do
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$(basename "$f")" "$(dpkg-deb -f "$f" Package)" "$(dpkg-deb -f "$f" Version)" \
      "$(dpkg-deb -f "$f" Architecture)" "$(stat -c %s "$f")" "$(sha256sum "$f" | cut -d' ' -f1)" >>"$manifest"
  done
  local got p
  got=$(tail -n +2 "$manifest" | cut -f2 | sort | tr '\n' ' ')
  for p in "${CARRIED_PACKAGES[@]}"; do
    grep -qw -- "$p" <<<"$got" || die "package $p was not downloaded (got: $got)"
  done
  # What travels: tracked and untracked-not-ignored files of the checkout, plus the carry folder.
  local tree_bytes carry_bytes total
  tree_bytes=$(cd "$repo" && git ls-files -z -co --exclude-standard | xargs -0 -r stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
  carry_bytes=$(du -sb "$carry" | cut -f1)
  total=$((tree_bytes + carry_bytes))
  say "$(($(wc -l <"$manifest") - 1)) packages in $carry/debs ($((carry_bytes / 1024)) KiB); working tree $((tree_bytes / 1024)) KiB; together $((total / 1024)) KiB of ${limit} MiB"
  ((total <= limit * 1024 * 1024)) || die "what would travel ($((total / 1024)) KiB) is over ${limit} MiB"
  say "prepared. On the GPU machine: scripts/gpu-check.sh run   (carry: ${carry#"$repo"/})"
}

# -------------------------------------------------------------------------------------------- run
# Results: one line per step, "name|PASS or FAIL or NOT RUN|seconds|note", turned into the report.
results=()
step_result() { results+=("$1|$2|$3|$4"); [[ $2 == PASS ]] || failed=1; say "$1: $2${4:+ ($4)}"; }
elapsed() { echo $((SECONDS - $1)); }
# Empties DIR for a fresh start, but only a DIR this script made (it holds MARKER) or an empty one:
# a mistyped --prefix /usr must never be deleted.
fresh_dir() {
  local dir=$1 marker=$2
  if [[ -e $dir && -n $(ls -A "$dir" 2>/dev/null) && ! -e $dir/$marker ]]; then
    die "$dir exists, is not empty and was not made by gpu-check (no $marker in it): name another folder"
  fi
  rm -rf "$dir" && mkdir -p "$dir" && touch "$dir/$marker" || die "cannot create $dir"
}
# Seconds left of --budget, at least 1 (`timeout 0` would mean no limit at all).
want() { [[ ,$steps, == *,$1,* ]]; }
remaining() { local r=$((budget - SECONDS)); ((r < 1)) && r=1; echo "$r"; }

# Unpacks one .deb with dpkg -x, or, where dpkg is missing, with Python (ar + tar, as dpkg-deb).
unpack_deb() {
  if command -v dpkg >/dev/null; then dpkg -x "$1" "$2"; return; fi
  python3 - "$1" "$2" <<'PY'
import io, sys, tarfile
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"!<arch>\n", "not an ar archive"
pos = 8
while pos < len(data):
    name, size = data[pos:pos + 16].decode().strip().rstrip("/"), int(data[pos + 48:pos + 58])
    body = data[pos + 60:pos + 60 + size]
    if name.startswith("data.tar"):
        tarfile.open(fileobj=io.BytesIO(body)).extractall(sys.argv[2], filter="tar")
        sys.exit(0)
    pos += 60 + size + (size & 1)
sys.exit("no data.tar member")
PY
}

any_exists() { local f; for f in "$@"; do [[ -e $f ]] && return 0; done; return 1; }

preflight() {
  local missing=() t
  for t in cmake ninja python3 c++; do command -v "$t" >/dev/null || missing+=("$t (not on PATH)"); done
  nvcc=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null) || missing+=("nvcc (not on PATH nor in /usr/local/cuda/bin)")
  if [[ -n ${nvcc:-} ]]; then
    cuda_root=$(cd "$(dirname "$nvcc")/.." && pwd)
    any_exists "$cuda_root"/include/cublas_v2.h "$cuda_root"/targets/*/include/cublas_v2.h ||
      missing+=("cuBLAS headers (cublas_v2.h) in $cuda_root")
    any_exists "$cuda_root"/lib64/libcublas.so "$cuda_root"/targets/*/lib/libcublas.so ||
      missing+=("libcublas.so in $cuda_root")
  fi
  [[ -f $carry/debs/MANIFEST.tsv ]] || missing+=("$carry/debs/MANIFEST.tsv (run 'scripts/gpu-check.sh prepare' on the CPU machine and carry ${carry#"$repo"/})")
  if ((!no_gpu)); then
    command -v compute-sanitizer >/dev/null || [[ -x ${cuda_root:-/nonexistent}/bin/compute-sanitizer ]] ||
      missing+=("compute-sanitizer")
    python3 -c 'import torch; assert torch.cuda.is_available(), "torch sees no CUDA device"' 2>/dev/null ||
      missing+=("python3 with torch and a CUDA device ($(python3 -c 'import torch; print(torch.__version__, torch.cuda.is_available())' 2>&1 | tail -1))")
  fi
  ((${#missing[@]} == 0)) || die "missing on this machine: $(printf '\n  - %s' "${missing[@]}")"
}

# The GPU, before anything is built: a run on a machine without one is a mistake, said at once.
require_gpu() {
  local list
  list=$(nvidia-smi -L 2>&1) || die "no GPU: nvidia-smi failed or is missing ($(head -1 <<<"$list")). This command needs a GPU machine; --no-gpu runs only the steps before the GPU ones."
  grep -q "^GPU " <<<"$list" || die "no GPU: nvidia-smi lists none ($list)"
  gpu_line=$(head -1 <<<"$list")
}

unpack_carry() {
  local t0=$SECONDS bad=() line f sum
  libdir=$prefix/usr/lib/$MULTIARCH
  if ((keep)) && [[ -e $prefix/.gpu-check-prefix && -x $prefix/bin/pkg-config && -d $prefix/ldpath ]]; then
    export LD_LIBRARY_PATH="$prefix/ldpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    step_result unpack PASS 0 "--keep: $prefix reused"
    return
  fi
  fresh_dir "$prefix" .gpu-check-prefix
  while IFS=$'\t' read -r f _ _ _ _ sum; do
    [[ $f == file ]] && continue
    [[ -f $carry/debs/$f ]] || { bad+=("$f: missing"); continue; }
    [[ $(sha256sum "$carry/debs/$f" | cut -d' ' -f1) == "$sum" ]] || { bad+=("$f: checksum differs"); continue; }
    unpack_deb "$carry/debs/$f" "$prefix" || bad+=("$f: unpack failed")
  done <"$carry/debs/MANIFEST.tsv"
  ((${#bad[@]} == 0)) || die "carried packages: ${bad[*]}"
  # pkg-config from the prefix, seeing only the prefix's .pc files, with their paths moved into it.
  mkdir -p "$prefix/bin"
  cat >"$prefix/bin/pkg-config" <<EOF
#!/bin/sh
export LD_LIBRARY_PATH="$libdir\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export PKG_CONFIG_LIBDIR="$libdir/pkgconfig:$prefix/usr/share/pkgconfig:$prefix/usr/lib/pkgconfig"
export PKG_CONFIG_SYSROOT_DIR="$prefix"
exec "$prefix/usr/bin/pkgconf" "\$@"
EOF
  chmod +x "$prefix/bin/pkg-config"
  "$prefix/bin/pkg-config" --modversion hwloc >/dev/null 2>&1 || die "the carried pkg-config cannot read hwloc.pc"
  # Carried shared libraries this machine lacks (by soname) go on LD_LIBRARY_PATH for the tests:
  # the executables find their direct dependencies through RUNPATH, but not what those need
  # (libhwloc's libudev.so.1, say). Sonames the machine has stay the machine's.
  mkdir -p "$prefix/ldpath"
  local so added=() cache
  # Read once: `ldconfig -p | grep -q` under pipefail fails whenever grep quits before ldconfig.
  cache=$("$(command -v ldconfig || echo /sbin/ldconfig)" -p 2>/dev/null)
  for so in "$libdir"/lib*.so.*; do
    [[ $(basename "$so") =~ ^lib.*\.so\.[0-9]+$ ]] || continue
    # Lines read "<TAB>libfmt.so.9 (libc6,x86-64) => /lib/...".
    if ! grep -qF $'\t'"$(basename "$so") (" <<<"$cache"; then ln -sf "$so" "$prefix/ldpath/"; added+=("$(basename "$so")"); fi
  done
  export LD_LIBRARY_PATH="$prefix/ldpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  step_result unpack PASS "$(elapsed "$t0")" "$(($(wc -l <"$carry/debs/MANIFEST.tsv") - 1)) .debs into $prefix; on LD_LIBRARY_PATH: ${added[*]:-none}"
}

find_nccl_root() {
  [[ -n $nccl_root ]] && return
  nccl_root=$(python3 -c 'import importlib.util as u; s = u.find_spec("nvidia.nccl"); print(list(s.submodule_search_locations)[0])' 2>/dev/null)
  if [[ -z $nccl_root || ! -f $nccl_root/include/nccl.h ]] || ! any_exists "$nccl_root"/lib/libnccl.so*; then
    ((no_gpu)) && { nccl_root=; return; }  # the self-test builds against the toolkit's NCCL
    die "NCCL: python3's nvidia-nccl wheel (nvidia.nccl with include/nccl.h and lib/libnccl.so.2) not found (got '$nccl_root'); --nccl-root DIR names another"
  fi
}

configure() {
  local t0=$SECONDS
  find_nccl_root
  if ((keep)) && [[ -e $build/.gpu-check-build && -f $build/build.ninja ]]; then
    step_result configure PASS 0 "--keep: $build reused"
    return
  fi
  local args=(-S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
              -DCMAKE_PREFIX_PATH="$prefix/usr" -DPKG_CONFIG_EXECUTABLE="$prefix/bin/pkg-config"
              -DCMAKE_CUDA_COMPILER="$nvcc" -DTRAINRT_WITH_CUDA=ON -DTRAINRT_WITH_NCCL=ON
              -DTRAINRT_WITH_SLURM=OFF -DTRAINRT_WITH_PMIX=OFF -DTRAINRT_WITH_GLOO=OFF
              # Debian keeps some headers in the multiarch folder (hwloc/autogen/config.h), which
              # the compiler searches only under /usr: the prefix's one goes first.
              -DCMAKE_CXX_FLAGS="-isystem $prefix/usr/include/$MULTIARCH"
              -DCMAKE_CUDA_FLAGS="-isystem $prefix/usr/include/$MULTIARCH"
              # Open MPI is only the peer of a CPU benchmark: never part of this check, on any machine.
              -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON)
  [[ -n $nccl_root ]] && args+=(-DNCCL_ROOT="$nccl_root")
  # The Python module for the interpreter that has torch (the GPU image's python3 brings nanobind):
  # AUTO, so a machine without nanobind builds the rest and the report's part line says why.
  if command -v python3 >/dev/null; then
    args+=(-DTRAINRT_WITH_PYTHON=AUTO -DPython_EXECUTABLE="$(command -v python3)")
  else
    args+=(-DTRAINRT_WITH_PYTHON=OFF)
  fi
  fresh_dir "$build" .gpu-check-build
  if ! cmake "${args[@]}" >"$logs/configure.log" 2>&1; then
    step_result configure FAIL "$(elapsed "$t0")" "see configure.log: $(grep -m1 -A2 'CMake Error' "$logs/configure.log" | tr '\n' ' ')"
    return 1
  fi
  # The library must be the wheel's, like the header: a toolkit libnccl.so found first would pair
  # one NCCL's header with another's library, and load a second NCCL beside torch's.
  if [[ -n $nccl_root ]] && ! grep -qE "part NCCL.*\(${nccl_root}/lib/libnccl" "$logs/configure.log"; then
    step_result configure FAIL "$(elapsed "$t0")" "NCCL's library is not the one under $nccl_root: $(grep -m1 'part NCCL' "$logs/configure.log")"
    return 1
  fi
  step_result configure PASS "$(elapsed "$t0")" "$(grep -E 'train-runtime part (CUDA|NCCL|PYTHON)' "$logs/configure.log" | sed 's/.*part //' | tr -s ' ' | paste -sd ';')"
}

# What the GPU steps run, as ninja targets (paths relative to the build folder): every program a
# GPU test runs or passes to its script, the benchmark and the trainer. Known after configure.
gpu_targets() {
  # ctest's JSON leaves out the command of a test whose program is not built yet: the names come
  # from it, the commands from the CTestTestfile.cmake files configure wrote.
  ctest --test-dir "$build" -L '^gpu$' --show-only=json-v1 2>/dev/null | python3 -c '
import glob, json, os, re, sys
build = os.path.realpath(sys.argv[1])
names = {t["name"] for t in json.load(sys.stdin).get("tests", [])}
out = {"tests/perf/kernels-bench", "tests/perf/nccl-bench", "tests/perf/ckpt-device-bench",
       "slurm_examples/trainer/train-mlp"}
for f in glob.glob(os.path.join(build, "**", "CTestTestfile.cmake"), recursive=True):
    for line in open(f, errors="replace"):
        m = re.match(r"add_test\(\[=\[(.*?)\]=\]\s+(.*)\)\s*$", line.strip())
        if not m or m.group(1) not in names:
            continue
        for word in re.findall(r"\"([^\"]*)\"", m.group(2)):
            real = os.path.realpath(word)
            if real.startswith(build + "/"):
                out.add(os.path.relpath(real, build))
print(" ".join(sorted(out)))' "$build"
}

# build_step NAME TARGETS...: ninja (no targets: all), then every program built must find every
# library it needs, carried ones included.
build_step() {
  local name=$1 t0=$SECONDS exe bad=(); shift
  # -k 0: every failing target is in the log, not only the first.
  if ! timeout "$(remaining)" ninja -C "$build" -k 0 -j "$jobs" "$@" >"$logs/$name.log" 2>&1; then
    step_result "$name" FAIL "$(elapsed "$t0")" "see $name.log: $(grep -c '^FAILED:' "$logs/$name.log") failed: $(grep '^FAILED:' "$logs/$name.log" | cut -c9- | head -5 | paste -sd,)$(grep -m1 'unknown target' "$logs/$name.log")"
    return 1
  fi
  while IFS= read -r exe; do
    [[ $(head -c 4 "$exe" | tr -d '\177') == ELF ]] || continue
    ldd "$exe" 2>/dev/null | grep -q "not found" && bad+=("$(basename "$exe"): $(ldd "$exe" | grep 'not found' | awk '{print $1}' | paste -sd,)")
  done < <(find "$build" -type f -perm -u+x ! -name '*.so*' ! -path '*/CMakeFiles/*')
  if ((${#bad[@]})); then step_result "$name" FAIL "$(elapsed "$t0")" "libraries not found: ${bad[*]}"; return 1; fi
  step_result "$name" PASS "$(elapsed "$t0")" "ninja -j$jobs ${*:-(everything)}; every program built finds its libraries"
}

gpu_tests() {
  local t0=$SECONDS listed missing=() name
  listed=$(ctest --test-dir "$build" -N -L '^gpu$' 2>&1)
  # python.cuda too: a GPU image without the module's build needs (Python headers, nanobind) must
  # show as a failure, not as a GPU run that passed without the Python CUDA path.
  local expected=("${EXPECTED_GPU_TESTS[@]}" python.cuda)
  for name in "${expected[@]}"; do grep -qE "Test +#[0-9]+: $name\$" <<<"$listed" || missing+=("$name"); done
  timeout "$(remaining)" ctest --test-dir "$build" -L '^gpu$' --output-on-failure --timeout 300 \
    --output-junit "$logs/gpu-tests.xml" >"$logs/gpu-tests.log" 2>&1
  local rc=$? counts
  counts=$(python3 "$repo/scripts/gpu_check/junit_counts.py" "$logs/gpu-tests.xml")
  read -r n nfail nskip npass bad <<<"$counts"
  local absent=${missing[*]:+; not registered: ${missing[*]}}
  if [[ $rc -eq 0 && $nfail == 0 && $nskip == 0 && -z $absent && $n -ge ${#expected[@]} ]]; then
    step_result gpu-tests PASS "$(elapsed "$t0")" "$npass of $n passed, 0 skipped"
  else step_result gpu-tests FAIL "$(elapsed "$t0")" "ctest exit $rc; $n run, $nfail failed, $nskip skipped ($bad)$absent"; fi
}

# A program that must exit 0 (77, "no device", is a failure here).
must_pass() {
  local name=$1 log=$2 t0=$SECONDS; shift 2
  timeout "$(remaining)" "$@" >"$logs/$log" 2>&1
  local rc=$?
  if [[ $rc -eq 0 ]]; then step_result "$name" PASS "$(elapsed "$t0")" "$log"
  else step_result "$name" FAIL "$(elapsed "$t0")" "exit $rc$([[ $rc -eq 124 ]] && echo ' (time budget)'); $log: $(tail -1 "$logs/$log")"; fi
}

# The GPU tests' programs (not the shell-script ones) as ctest runs them, one per line: name, env
# and the command's words, separated by US (0x1f: empty fields survive, unlike with a tab).
US=$'\x1f'
sanitizer_targets() {
  ctest --test-dir "$build" -L '^gpu$' --show-only=json-v1 2>/dev/null | python3 "$repo/scripts/gpu_check/sanitizer_targets.py"
}

# Nsight Compute's DRAM throughput (% of the peak it knows) for every kernel kernels-bench launches
# at 256 MiB, one row per kernel in ncu-kernels.txt. --clock-control none: the clocks stay as the
# machine runs them (METHOD.md), so the percentages are those of the timed runs.
ncu_kernels() {
  local t0=$SECONDS ncu rc
  ncu=$(command -v ncu || echo "$cuda_root/bin/ncu")
  [[ -x $ncu ]] || { step_result ncu FAIL 0 "ncu not found (PATH, $cuda_root/bin)"; return; }
  timeout "$(remaining)" "$ncu" --clock-control none --csv --print-units base --log-file "$logs/ncu-kernels.csv" \
    --metrics dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes.sum,gpu__time_duration.sum \
    "$build/tests/perf/kernels-bench" --gpu --sizes 256M --iters 1 >"$logs/ncu-kernels.log" 2>&1
  rc=$?
  if ((rc != 0)); then
    step_result ncu FAIL "$(elapsed "$t0")" "exit $rc$([[ $rc -eq 124 ]] && echo ' (time budget)'); $(tail -1 "$logs/ncu-kernels.log")"
    return
  fi
  if python3 "$repo/scripts/gpu_check/ncu_table.py" "$logs/ncu-kernels.csv" >"$logs/ncu-kernels.txt"; then
    step_result ncu PASS "$(elapsed "$t0")" "ncu-kernels.txt: $(($(wc -l <"$logs/ncu-kernels.txt") - 1)) kernel launches"
  else
    step_result ncu FAIL "$(elapsed "$t0")" "ncu's CSV could not be read: $(tail -1 "$logs/ncu-kernels.txt")"
  fi
}

# compute-sanitizer memcheck and racecheck over those programs and a short trainer run on the GPU
# that also restores a device checkpoint (its own folders per tool).
sanitize() {
  local sanitizer tool line name env t0 rc per log errors work runs n cmd=()
  sanitizer=$(command -v compute-sanitizer || echo "$cuda_root/bin/compute-sanitizer")
  local trainer=$build/slurm_examples/trainer/train-mlp
  mapfile -t lines < <(sanitizer_targets)
  ((${#lines[@]})) || step_result sanitizer FAIL 0 "no GPU test programs found to run under compute-sanitizer"
  for tool in memcheck racecheck; do
    work=$logs/sanitizer-trainer-$tool
    # The trainer first (issue 14 asks for memcheck over it), the kernel test, the slowest under a
    # sanitizer, last; a budget that runs out then costs the least wanted run.
    runs=()
    for n in 8 12; do
      runs+=("$( ((n == 8)) && echo train-mlp.fresh || echo train-mlp.resume)${US}NCCL_SOCKET_IFNAME=lo${US}$trainer${US}--device${US}cuda${US}--steps${US}$n${US}--ckpt-every${US}4${US}--ckpt-dir${US}$work/c${US}--out${US}$work/o")
    done
    for line in "${lines[@]}"; do [[ $line == kernels.* ]] || runs+=("$line"); done
    for line in "${lines[@]}"; do [[ $line == kernels.* ]] && runs+=("$line"); done
    for line in "${runs[@]}"; do
      IFS=$US read -r -a cmd <<<"$line"
      name=${cmd[0]} env=${cmd[1]} cmd=("${cmd[@]:2}")
      t0=$SECONDS per=$(($(remaining) - 10)); ((per > 240)) && per=240
      log=sanitizer-$tool-$name.log
      if ((per < 20)); then step_result "$tool $name" "NOT RUN" 0 "time budget spent"; continue; fi
      # shellcheck disable=SC2086  # env is a list of NAME=VALUE words
      # TRAINRT_GPU_TEST_SKIP_HUGE: the 2^31-element case checks indexing, not memory safety, and
      # takes minutes under a sanitizer; gpu-tests runs it without one.
      timeout "$per" env $env TRAINRT_GPU_TEST_SKIP_HUGE=1 "$sanitizer" --tool "$tool" --error-exitcode 99 --print-limit 20 --report-api-errors no "${cmd[@]}" >"$logs/$log" 2>&1
      rc=$?
      errors=$(grep -oE 'ERROR SUMMARY: [0-9]+ error|RACECHECK SUMMARY: [0-9]+ hazard[s]?' "$logs/$log" | tail -1)
      if [[ $rc -eq 0 ]]; then step_result "$tool $name" PASS "$(elapsed "$t0")" "${errors:-no summary line}"
      else step_result "$tool $name" FAIL "$(elapsed "$t0")" "exit $rc$([[ $rc -eq 124 ]] && echo " (over ${per} s)"); ${errors:-$(tail -1 "$logs/$log")}"; fi
    done
  done
}

write_report() {
  local report=$out/gpu-check-report.md r name status secs note
  {
    echo "# gpu-check report"
    echo
    echo "- verdict: **$( ((failed)) && echo FAIL || echo PASS)**$( ((no_gpu)) && echo ' (--no-gpu: the GPU steps were not run)')$([[ $steps != "$ALL_STEPS" ]] && echo " (only the GPU steps $steps)")"
    echo "- when: $(date -u +%FT%TZ), $SECONDS s in all; commit $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$repo" status --porcelain 2>/dev/null | grep -q . && echo ' (with local changes)')"
    echo "- machine: $(nproc) cores; ${gpu_line:-no GPU}; $(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1 | sed 's/^/driver /')"
    echo "- tools: $("$nvcc" --version 2>/dev/null | grep -o 'release [0-9.]*' | sed 's/^/CUDA /'); $(cmake --version | head -1); ninja $(ninja --version); $(python3 -c 'import torch; print("torch", torch.__version__)' 2>/dev/null)"
    echo "- NCCL: ${nccl_root:-(the CUDA toolkit NCCL)}; prefix: $prefix; build: $build"
    echo
    echo "| step | result | s | note |"
    echo "|---|---|---|---|"
    for r in "${results[@]}"; do
      IFS='|' read -r name status secs note <<<"$r"
      echo "| $name | $status | $secs | ${note//|//} |"
    done
    echo
    echo "## Carried packages"
    echo '```'
    column -t -s $'\t' "$carry/debs/MANIFEST.tsv" 2>/dev/null | cut -c1-140 || cat "$carry/debs/MANIFEST.tsv"
    echo '```'
    for f in gpu-tests.log kernels-bench.log kernels-torch.log nccl-bench.log nccl-torch.log ckpt-device-bench.log \
             ckpt-device-torch.log trainer-resume.log trainer-gpu.log torch-train.log ncu-kernels.txt; do
      [[ -f $logs/$f ]] || continue
      echo "## $f (last 60 lines)"
      echo '```'
      tail -n 60 "$logs/$f"
      echo '```'
    done
    if grep -l "FAIL\|ERROR" "$logs"/sanitizer-*.log >/dev/null 2>&1; then
      echo "## compute-sanitizer findings (first 40 lines of each failing log)"
      for f in "$logs"/sanitizer-*.log; do
        grep -q "ERROR SUMMARY: 0 error\|RACECHECK SUMMARY: 0 hazard" "$f" && continue
        echo "### $(basename "$f")"; echo '```'; head -n 40 "$f"; echo '```'
      done
    fi
  } >"$report"
  tar -czf "$out/gpu-check-logs.tar.gz" -C "$(dirname "$logs")" "$(basename "$logs")" 2>/dev/null
  say "report: $report (logs: $out/gpu-check-logs.tar.gz)"
}

run() {
  carry=$repo/gpu-carry prefix=/opt/trainrt-deps build=$repo/build-gpu-check out=${OUT:-$repo/gpu-check-out}
  jobs=$(nproc) budget=540 no_gpu=0 targets="" nccl_root="" failed=0 gpu_line="" keep=0 steps=$ALL_STEPS
  while (($#)); do
    case $1 in
      --out) out=$2; shift 2 ;;
      --carry) carry=$2; shift 2 ;;
      --prefix) prefix=$2; shift 2 ;;
      --build) build=$2; shift 2 ;;
      --jobs) jobs=$2; shift 2 ;;
      --budget) budget=$2; shift 2 ;;
      --targets) targets=$2; shift 2 ;;
      --nccl-root) nccl_root=$2; shift 2 ;;
      --no-gpu) no_gpu=1; shift ;;
      --keep) keep=1; shift ;;
      --steps) steps=$2; shift 2 ;;
      *) die "run: unknown argument '$1'" ;;
    esac
  done
  local st
  for st in ${steps//,/ }; do [[ ,$ALL_STEPS, == *,$st,* ]] || die "--steps: '$st' is none of $ALL_STEPS"; done
  [[ $prefix == / || -z $prefix ]] && die "the prefix must not be / (the carried packages never go into the system)"
  [[ $(uname -m) == x86_64 ]] || die "the carried .debs are amd64; this machine is $(uname -m)"
  ((no_gpu)) || require_gpu
  preflight
  mkdir -p "$out" || die "cannot create $out"
  logs=$(mktemp -d /tmp/gpu-check-logs.XXXXXX)/logs && mkdir -p "$logs"
  export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo}  # one machine: keep NCCL off other interfaces
  # NCCL's own account of init into files that travel in the logs tarball (stdout stays clean for
  # the greps): an init failure in this VM must come back with its reason, not only its code.
  export NCCL_DEBUG=${NCCL_DEBUG:-INFO} NCCL_DEBUG_SUBSYS=${NCCL_DEBUG_SUBSYS:-INIT,ENV} \
    NCCL_DEBUG_FILE=${NCCL_DEBUG_FILE:-$logs/nccl-%h-%p.log}
  unpack_carry
  local gpu_parts=()
  if ((no_gpu)); then
    # shellcheck disable=SC2086  # --targets is a list of ninja targets
    configure && build_step build $targets
  elif configure && read -r -a gpu_parts <<<"$(gpu_targets)" && build_step build-gpu-parts "${gpu_parts[@]}"; then
    # The Python module apart: a nanobind of the image that our bindings do not compile with must
    # cost python.cuda alone, never the other GPU results.
    { want tests || want trainer; } && [[ -d $build/python/CMakeFiles/_trainrt.dir ]] && build_step build-python _trainrt
    want tests && gpu_tests
    # Device checkpoints on the machine's disk (up to ~17 GiB), not in /tmp, which may be memory.
    # PyTorch peers with their own libraries: nothing of the prefix on their library path.
    local ckpt_dir=$build/ckpt-bench torch_env=(env -u LD_LIBRARY_PATH PYTHONUNBUFFERED=1 python3 -u)
    want kernels && must_pass kernels-bench kernels-bench.log "$build/tests/perf/kernels-bench" --gpu
    want kernels && must_pass kernels-torch kernels-torch.log "${torch_env[@]}" "$repo/benchmarks/kernels_torch.py"
    want nccl && must_pass nccl-bench nccl-bench.log "$build/tests/perf/nccl-bench"
    want nccl && must_pass nccl-torch nccl-torch.log "${torch_env[@]}" "$repo/benchmarks/nccl_torch.py" \
      --runtime-log "$logs/nccl-bench.log"
    want ckpt && must_pass ckpt-device-bench ckpt-device-bench.log "$build/tests/perf/ckpt-device-bench" \
      --dir "$ckpt_dir" --sizes 1024,8192
    want ckpt && must_pass ckpt-device-torch ckpt-device-torch.log "${torch_env[@]}" "$repo/benchmarks/ckpt_torch.py" \
      --device cuda --dir "$ckpt_dir" 1024 8192
    want trainer && must_pass trainer-resume trainer-resume.log bash "$repo/slurm_examples/trainer/resume_bitwise.sh" \
      "$build/slurm_examples/trainer/train-mlp" cuda 120
    want trainer && must_pass trainer-gpu trainer-gpu.log bash "$repo/benchmarks/trainer_gpu.sh" --build "$build" \
      --out "$logs/trainer-gpu"
    # PyTorch through trainrt.torch: the NCCL process group, DDP on the GPU, CUDA tensors in the
    # module's checkpoints; 40 steps, then a rerun that must resume at 41.
    want trainer && must_pass torch-train torch-train.log bash -c '
      set -o pipefail; run() { PYTHONPATH=$1/python PYTHONUNBUFFERED=1 python3 "$2/slurm_examples/train_torch.py" \
        --device cuda --save-every 20 --ckpt-dir "$3/torch-train" --steps "$4"; }
      run "$1" "$2" "$3" 40 && run "$1" "$2" "$3" 60 | tee /dev/stderr | grep "steps 41\.\.60"' _ "$build" "$repo" "$logs"
    want ncu && ncu_kernels
    want sanitizer && sanitize
    # The rest of the tree last: a compile error elsewhere must not cost the GPU results.
    want rest && build_step build-rest
  fi
  write_report
  ((failed)) && { say "FAILED (see the report)"; exit 1; }
  ((no_gpu)) && say "the steps before the GPU ones passed (--no-gpu: nothing ran on a GPU)" || say "all passed"
}

case ${1:-} in
  prepare) shift; prepare "$@" ;;
  run) shift; run "$@" ;;
  gpu-targets) build=$(cd "${2:?gpu-targets BUILD_DIR}" && pwd) && gpu_targets ;;  # for the self-test
  *) sed -n '2,/^set -uo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
