# gpu-check run, before the GPU steps (sourced by scripts/gpu-check.sh): the GPU and the tools,
# the carried packages, the pinned nanobind and the NCCL header, configure, and the one build.
# shellcheck shell=bash

MULTIARCH=x86_64-linux-gnu

# The GPU, before anything is built: a run on a machine without one is a mistake, said at once.
require_gpu() {
  local list cap
  list=$(timeout 30 nvidia-smi -L 2>&1) || die "no GPU: nvidia-smi failed or is missing ($(head -1 <<<"$list")). This command needs a GPU machine; --no-gpu runs only the steps before the GPU ones."
  grep -q "^GPU " <<<"$list" || die "no GPU: nvidia-smi lists none ($list)"
  gpu_line=$(head -1 <<<"$list")
  driver=$(timeout 30 nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)
  if [[ $cuda_arch == auto ]]; then
    # The GPU's own architecture (9.0 -> 90): one compile per .cu file, and no CMake probe that
    # needs the GPU at configure time, as `native` would.
    cap=$(timeout 30 nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
    [[ $cap =~ ^[0-9]+$ ]] && cuda_arch=$cap || cuda_arch=90
  fi
}

preflight() {
  local t0=$SECONDS missing=() notes=() t
  [[ $cuda_arch == auto ]] && cuda_arch=90  # --no-gpu: what the H100/H200 take
  for t in cmake ninja python3 c++; do command -v "$t" >/dev/null || missing+=("$t (not on PATH)"); done
  nvcc=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null) || missing+=("nvcc (not on PATH nor in /usr/local/cuda/bin)")
  if [[ -n ${nvcc:-} ]]; then
    cuda_root=$(cd "$(dirname "$nvcc")/.." && pwd)
    any_exists "$cuda_root"/include/cublas_v2.h "$cuda_root"/targets/*/include/cublas_v2.h ||
      missing+=("cuBLAS headers (cublas_v2.h) in $cuda_root")
    any_exists "$cuda_root"/lib64/libcublas.so "$cuda_root"/lib/libcublas.so "$cuda_root"/targets/*/lib/libcublas.so ||
      missing+=("libcublas.so in $cuda_root")
  fi
  [[ -f $carry/debs/MANIFEST.tsv && -f $carry/CARRY.tsv ]] ||
    missing+=("$carry/debs/MANIFEST.tsv and $carry/CARRY.tsv (run 'scripts/gpu-check.sh prepare' on the CPU machine and carry ${carry#"$repo"/})")
  ((${#missing[@]} == 0)) || die "missing on this machine: $(printf '\n  - %s' "${missing[@]}")"
  # Wanted only by some steps: a gap fails those steps, not the run.
  if ((!no_gpu)); then
    if want sanitizer && ! command -v compute-sanitizer >/dev/null && [[ ! -x $cuda_root/bin/compute-sanitizer ]]; then
      notes+=("no compute-sanitizer")
    fi
    if want ncu && ! command -v ncu >/dev/null && [[ ! -x $cuda_root/bin/ncu ]]; then notes+=("no ncu"); fi
    # Under a timeout: a CUDA initialisation that hangs must not take the whole call.
    torch_line=$(timeout 120 python3 -c 'import torch; print("torch", torch.__version__, "sees", torch.cuda.device_count(), "GPU(s)")' 2>&1 | tail -1)
    [[ $torch_line == *"sees "[1-9]* ]] || notes+=("python3's torch cannot use the GPU: $torch_line")
  fi
  tools_line="$("$nvcc" --version | grep -o 'release [0-9.]*' | sed 's/^/CUDA /'); $(cmake --version | head -1); ninja $(ninja --version); $(python3 --version 2>&1); ${torch_line:-torch not asked}"
  if ((${#notes[@]})); then step_result preflight FAIL "$(elapsed "$t0")" "${notes[*]} (the steps that need it fail; the others run)"
  else step_result preflight PASS "$(elapsed "$t0")" "GPU arch $cuda_arch; $tools_line"; fi
}

unpack_carry() {
  local t0=$SECONDS bad=() f sum
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

# carried_file PATH: $carry/PATH when CARRY.tsv lists PATH and the file has its checksum; else nothing.
carried_file() {
  local path=$carry/$1 sum
  sum=$(awk -F'\t' -v w="$1" '$1 == w {print $4; exit}' "$carry/CARRY.tsv")
  [[ -n $sum && -f $path && $(sha256sum "$path" | cut -d' ' -f1) == "$sum" ]] && echo "$path"
}

# The pinned nanobind first, and NCCL's library from python3's wheel with a header of its version.
pins() {
  local t0=$SECONDS bad=() whl nb image_nb got v have
  nb_site=""
  whl=$(ls "$carry"/wheels/nanobind-*.whl 2>/dev/null | head -1)
  if [[ -z $whl || -z $(carried_file "wheels/$(basename "$whl")") ]]; then
    bad+=("no carried nanobind wheel with the checksum of CARRY.tsv: the Python module is not built")
  else
    nb=$(basename "$whl" | cut -d- -f2)
    nb_site=$prefix/nanobind-$nb
    # Unpacked once per prefix: a fresh copy under --keep would be newer than the build, and make
    # ninja rerun CMake, whose files it is.
    if [[ ! -f $nb_site/.unpacked ]]; then
      rm -rf "$nb_site" && python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$whl" "$nb_site" &&
        touch "$nb_site/.unpacked"
    fi
    got=$(cd / && PYTHONPATH=$nb_site timeout 60 python3 -c 'import nanobind; print(nanobind.__version__, nanobind.cmake_dir())' 2>&1 | tail -1)
    image_nb=$(cd / && timeout 60 python3 -c 'import nanobind; print(nanobind.__version__)' 2>/dev/null || echo none)
    if [[ $got == "$nb $nb_site/"* ]]; then nanobind_line="$nb from the carried wheel (python3's own: $image_nb)"
    else bad+=("the carried nanobind $nb does not import first ($got)"); nb_site=""; fi
  fi
  find_nccl || bad+=("$nccl_line")
  pytest_for_python_tests || bad+=("$pytest_line")
  if ((${#bad[@]})); then step_result pins FAIL "$(elapsed "$t0")" "${bad[*]}"
  else step_result pins PASS "$(elapsed "$t0")" "nanobind $nanobind_line; NCCL $nccl_line; pytest $pytest_line"; fi
}

# The python.* tests run under pytest: the image's own, else the carried wheels (checksums of
# CARRY.tsv) installed offline into python3. Sets pytest_line.
pytest_for_python_tests() {
  local w have
  have=$(cd / && timeout 60 python3 -c 'import pytest; print(pytest.__version__)' 2>/dev/null)
  if [[ -n $have ]]; then pytest_line="$have (the image's)"; return 0; fi
  # Installing touches python3's site-packages: only on the lent machine, never on the CPU one.
  if ((no_gpu)); then pytest_line="none (--no-gpu: the carried wheels are installed only on the GPU machine)"; return 0; fi
  for w in "$carry"/wheels/pytest/*.whl; do
    [[ -n $(carried_file "wheels/pytest/$(basename "$w")") ]] || { pytest_line="carried wheel $(basename "$w") fails its checksum"; return 1; }
  done
  if ! timeout 120 python3 -m pip install --quiet --no-index --find-links "$carry/wheels/pytest" pytest >"$logs/pytest-install.log" 2>&1; then
    pytest_line="installing the carried pytest failed: $(tail -1 "$logs/pytest-install.log")"
    return 1
  fi
  have=$(cd / && timeout 60 python3 -c 'import pytest; print(pytest.__version__)' 2>&1 | tail -1)
  pytest_line="$have from the carried wheels"
}

# NCCL for the build: the library of python3's nvidia-nccl wheel (the one torch loads), and the
# wheel's nccl.h, or where it has none the carried nccl.h of the wheel's version (the nearest patch
# of the same minor version if that one was not carried, said so). Sets nccl_root, nccl_lib,
# nccl_include, nccl_line. --no-gpu without a wheel: the CUDA toolkit's NCCL, as configure finds it.
find_nccl() {
  local site ver dist hdr v best=""
  nccl_lib="" nccl_include=""
  if [[ -z $nccl_root ]]; then
    nccl_root=$(cd / && timeout 60 python3 -c 'import importlib.util as u; s = u.find_spec("nvidia.nccl"); print(list(s.submodule_search_locations)[0])' 2>/dev/null)
  fi
  if [[ -z $nccl_root ]] && ((no_gpu)); then nccl_line="the CUDA toolkit's (no nvidia.nccl wheel: --no-gpu)"; return 0; fi
  nccl_lib=$(ls "$nccl_root"/lib/libnccl.so* 2>/dev/null | head -1)
  if [[ -z $nccl_lib ]]; then
    nccl_line="python3's nvidia-nccl wheel (nvidia.nccl with lib/libnccl.so.2) not found (got '$nccl_root'); --nccl-root DIR names another; NCCL is off"
    nccl_root=""; return 1
  fi
  # The wheel's version from its dist-info beside the nvidia/ folder (site-packages/nvidia/nccl).
  site=$(cd "$nccl_root/../.." && pwd)
  dist=$(ls -d "$site"/nvidia_nccl_cu*-*.dist-info 2>/dev/null | head -1)
  ver=$(basename "${dist:-none}" .dist-info | cut -d- -f2)
  if [[ -f $nccl_root/include/nccl.h ]]; then
    nccl_include=$nccl_root/include
    nccl_line="${ver:-?}: $nccl_lib, nccl.h from the wheel"
    return 0
  fi
  if [[ ! $ver =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
    nccl_line="the wheel at $nccl_root has no nccl.h and no version (dist-info '$dist'): no header can be chosen; NCCL is off"
    nccl_root=""; return 1
  fi
  hdr=$carry/nccl/$ver/include/nccl.h
  if [[ -n $(carried_file "nccl/$ver/include/nccl.h") ]]; then
    nccl_include=$(dirname "$hdr")
    nccl_line="$ver: $nccl_lib, the carried nccl.h of $ver (the wheel has none)"
    return 0
  fi
  for v in $(ls "$carry/nccl" 2>/dev/null | sort -V); do
    [[ ${v%.*} == "${ver%.*}" && -n $(carried_file "nccl/$v/include/nccl.h") ]] && best=$v
  done
  if [[ -n $best ]]; then
    nccl_include=$carry/nccl/$best/include
    nccl_line="$ver: $nccl_lib, the carried nccl.h of $best, NOT $ver (the wheel has none, and $ver was not carried: scripts/gpu-check.sh prepare --nccl-versions $ver)"
    return 0
  fi
  nccl_line="the wheel ($ver, $nccl_root) has no nccl.h and none of its version was carried (carried: $(ls "$carry/nccl" 2>/dev/null | tr '\n' ' ')); NCCL is off"
  nccl_root=""; nccl_lib=""
  return 1
}

configure() {
  local t0=$SECONDS
  if ((keep)) && [[ -e $build/.gpu-check-build && -f $build/build.ninja ]]; then
    step_result configure PASS 0 "--keep: $build reused"
    return
  fi
  local args=(-S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRAINRT_CUDA_ARCHITECTURES="$cuda_arch"
              -DCMAKE_PREFIX_PATH="$prefix/usr" -DPKG_CONFIG_EXECUTABLE="$prefix/bin/pkg-config"
              -DCMAKE_CUDA_COMPILER="$nvcc" -DTRAINRT_WITH_CUDA=ON
              -DTRAINRT_WITH_SLURM=OFF -DTRAINRT_WITH_PMIX=OFF -DTRAINRT_WITH_GLOO=OFF
              # Debian keeps some headers in the multiarch folder (hwloc/autogen/config.h), which
              # the compiler searches only under /usr: the prefix's one goes first.
              -DCMAKE_CXX_FLAGS="-isystem $prefix/usr/include/$MULTIARCH"
              # -lineinfo: compute-sanitizer and ncu name source lines, at no cost in speed.
              -DCMAKE_CUDA_FLAGS="-isystem $prefix/usr/include/$MULTIARCH -lineinfo"
              # Open MPI is only the peer of a CPU benchmark: never part of this check, on any machine.
              -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON)
  if [[ -n $nccl_lib ]]; then
    args+=(-DTRAINRT_WITH_NCCL=ON -DNCCL_ROOT="$nccl_root" -DNCCL_LIBRARY="$nccl_lib" -DNCCL_INCLUDE_DIR="$nccl_include")
  elif ((no_gpu)) && [[ -z $nccl_root ]]; then args+=(-DTRAINRT_WITH_NCCL=ON)
  else args+=(-DTRAINRT_WITH_NCCL=OFF); fi
  # The Python module for the interpreter that has torch, with the carried nanobind.
  if [[ -n $nb_site ]]; then
    args+=(-DTRAINRT_WITH_PYTHON=ON -DPython_EXECUTABLE="$(command -v python3)" -Dnanobind_DIR="$nb_site/nanobind/cmake")
  else
    args+=(-DTRAINRT_WITH_PYTHON=OFF)
  fi
  # TEST HOOK (tests/gpu_check/self_test.sh only): one target made to fail to compile.
  [[ -n $test_break_target ]] && args+=(-DCMAKE_PROJECT_INCLUDE="$repo/scripts/gpu_check/test_hook.cmake"
                                        -DGPU_CHECK_TEST_BREAK_TARGET="$test_break_target")
  fresh_dir "$build" .gpu-check-build
  PYTHONPATH=${nb_site}${PYTHONPATH:+:$PYTHONPATH} timeout -k 10 "$(cap_at 240)" cmake "${args[@]}" >"$logs/configure.log" 2>&1
  local rc=$?
  if ((rc != 0)); then
    step_result configure FAIL "$(elapsed "$t0")" "$(timed_out $rc && echo "cut after $(elapsed "$t0") s; ")see configure.log: $(grep -m1 -A2 'CMake Error' "$logs/configure.log" | tr '\n' ' ' | cut -c1-300)"
    return 1
  fi
  local bad=()
  # The library must be the wheel's, like the header: a toolkit libnccl.so found first would pair
  # one NCCL's header with another's library, and load a second NCCL beside torch's.
  if [[ -n $nccl_lib ]] && ! grep -qF "(${nccl_lib})" <(grep 'part NCCL' "$logs/configure.log"); then
    bad+=("NCCL's library is not $nccl_lib: $(grep -m1 'part NCCL' "$logs/configure.log")")
  fi
  # What the module compiles against, not only what was asked for.
  if [[ -n $nb_site ]] && ! grep -qF -- "-I$nb_site/nanobind/include" "$build/build.ninja"; then
    bad+=("the module does not compile against the carried nanobind ($(grep -o -- '-I[^ ]*nanobind/include' "$build/build.ninja" | sort -u | head -1))")
  fi
  local parts
  parts=$(grep -E 'train-runtime part (CUDA|NCCL|PYTHON)' "$logs/configure.log" | sed 's/.*part //' | tr -s ' ' | paste -sd ';')
  if ((${#bad[@]})); then step_result configure FAIL "$(elapsed "$t0")" "${bad[*]}; $parts"; return 1; fi
  step_result configure PASS "$(elapsed "$t0")" "$parts"
}

# Every program a GPU test runs or hands to its script, as ninja paths relative to the build
# folder. ctest's JSON leaves out the command of a test whose program is not built yet: the names
# come from it, the commands from the CTestTestfile.cmake files configure wrote.
gpu_test_targets() {
  local listed all found
  listed=$(ninja -C "$build" -t targets all 2>/dev/null)  # "NAME: RULE" lines
  all=$(cut -d: -f1 <<<"$listed")
  # Only ninja targets: a test's other words inside the build folder (a --dir) are not programs.
  found=$(ctest --test-dir "$build" -L '^gpu$' --show-only=json-v1 2>/dev/null | python3 -c '
import glob, json, os, re, sys
build = os.path.realpath(sys.argv[1])
names = {t["name"] for t in json.load(sys.stdin).get("tests", [])}
out = set()
# The whole text, not line by line, and any word, quoted or not. On the first GPU machine (CMake
# 4.4.3) neither this nor the earlier one-line, quoted-words pattern found a program (why is not
# known yet): the fallback after this is what built them there.
for f in glob.glob(os.path.join(build, "**", "CTestTestfile.cmake"), recursive=True):
    text = open(f, errors="replace").read()
    for m in re.finditer(r"add_test\(\s*\[=\[(.*?)\]=\](.*?)\)\s*(?:\n|$)", text, re.S):
        if m.group(1) not in names:
            continue
        for word in re.findall(r"[^\s\"()]+", m.group(2)):
            real = os.path.realpath(word)
            if real.startswith(build + "/"):
                out.add(os.path.relpath(real, build))
print("\n".join(sorted(out)))' "$build" | grep -xF -f <(echo "$all") | paste -sd' ')
  # On the first GPU machine (CMake 4.4.3) this found nothing, and 3 GPU tests ran without their
  # programs: then every program configure made (all of them build in well under a minute there).
  [[ -n $found ]] || found=$(awk -F': ' '$2 ~ /EXECUTABLE_LINKER/ && $1 !~ /\.cmake$/ {print $1}' <<<"$listed" | paste -sd' ')
  echo "$found"
}

# The file a target makes: its own path, or for a phony name (_trainrt, trainrt-topo) the first
# file it stands for (python/trainrt/_trainrt.cpython-*.so, topology/trainrt-topo).
target_file() {
  if [[ $2 != phony ]]; then echo "$build/$1"; return; fi
  ninja -C "$build" -t query "$1" 2>/dev/null | awk '/^  input: phony/ {p = 1; next} /^  outputs:/ {p = 0} p && NF {print $1; exit}' |
    sed "s|^|$build/|"
}

# A target is built when its file exists and ninja has no compile or link left to do for it (a
# file from an older build that a failed compile left in place is not; the Python package's copy
# step, which runs every time, does not count).
# is_built TARGET RULE (phony: a name, such as _trainrt or trainrt-topo, with no file of its own).
is_built() {
  local out
  [[ $2 == phony || -e $build/$1 ]] || return 1
  out=$(ninja -C "$build" -n "$1" 2>&1) && ! grep -qE "Building |Linking " <<<"$out"
}

# build_all TARGET...: one `ninja -k 0` of every target the chosen steps need, so that one that
# fails costs only the steps that need it; then which were built, and that each built program
# finds every library it needs (carried ones included). Sets built_targets.
build_all() {
  local t0=$SECONDS t known=() unknown=() failed_t=() exe bad=()
  built_targets=()
  local -A rule=()
  while IFS= read -r t; do rule[${t%: *}]=${t##*: }; done < <(ninja -C "$build" -t targets all 2>/dev/null)
  for t in "$@"; do
    if [[ -n ${rule[$t]:-} ]]; then known+=("$t"); else unknown+=("$t"); fi
  done
  if ((${#known[@]})); then
    timeout -k 10 "$(remaining)" ninja -C "$build" -k 0 -j "$jobs" "${known[@]}" >"$logs/build.log" 2>&1
    local rc=$?
    timed_out $rc && echo "gpu-check: ninja cut by the time budget after $(elapsed "$t0") s" >>"$logs/build.log"
  fi
  for t in "${known[@]}"; do if is_built "$t" "${rule[$t]}"; then built_targets+=("$t"); else failed_t+=("$t"); fi; done
  for t in "${built_targets[@]}"; do
    exe=$(target_file "$t" "${rule[$t]}")
    [[ -f $exe && -x $exe ]] || continue
    if ldd "$exe" 2>/dev/null | grep -q "not found"; then
      bad+=("${exe#"$build"/}: $(ldd "$exe" | grep 'not found' | awk '{print $1}' | paste -sd,)")
    fi
  done
  local note="ninja -k 0 -j$jobs of ${#known[@]} targets: ${#built_targets[@]} built"
  ((${#failed_t[@]})) && note+="; NOT built: ${failed_t[*]} (first errors: $(grep '^FAILED:' "$logs/build.log" | cut -c9- | sed 's/ *$//' | head -3 | paste -sd,))"
  ((${#unknown[@]})) && note+="; not configured: ${unknown[*]} (configure.log's part lines say why)"
  ((${#bad[@]})) && note+="; libraries not found: ${bad[*]}"
  if ((${#failed_t[@]} + ${#unknown[@]} + ${#bad[@]})); then step_result build FAIL "$(elapsed "$t0")" "$note"
  else step_result build PASS "$(elapsed "$t0")" "$note; every program built finds its libraries"; fi
}
