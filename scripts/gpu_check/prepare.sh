# gpu-check prepare (sourced by scripts/gpu-check.sh): everything the GPU machine lacks, fetched on
# the CPU machine into the carry folder, which travels with the working tree (64 MiB in all).
# shellcheck shell=bash

# What the build needs beyond a compiler, CMake, Ninja and the CUDA toolkit: the -dev packages
# (headers, CMake/pkg-config files), their shared libraries, what those need (libudev1 for hwloc)
# and pkg-config itself (pkgconf). Nothing of Slurm, PMIx or Gloo: those parts are OFF there.
CARRIED_PACKAGES=(libhwloc-dev libhwloc15 libudev1 libfmt-dev libfmt9 nlohmann-json3-dev libpugixml-dev
                  libpugixml1v5 libcli11-dev catch2 libxxhash-dev libxxhash0 pkgconf-bin libpkgconf3)
# The NCCL the GPU image's torch 2.11.0 (cu130) pins: its wheel's METADATA says
# "Requires-Dist: nvidia-nccl-cu13==2.28.9". The GPU build links that wheel's libnccl.so.2; when the
# wheel brings no nccl.h, `run` takes the carried header of the same version.
NCCL_PINNED=2.28.9
# sha256 of nvidia/nccl/include/nccl.h inside nvidia_nccl_cu13-2.28.9-py3-none-manylinux_2_18_x86_64.whl
# (read from PyPI once, 2026-11): a local nccl.h of that version is taken only when it is this file.
declare -A NCCL_H_SHA256=([2.28.9]=06b934792a70f08cafabd96b8f94015b143a182fbb3bc56ac71c4c6de7deb971)

# The nanobind the CPU machine builds with: the pin in scripts/python-env.sh, the one source.
nanobind_pin() {
  grep -oE 'nanobind==[0-9][0-9a-z.]*' "$repo/scripts/python-env.sh" | head -1 | cut -d= -f3
}

sha256() { sha256sum "$1" | cut -d' ' -f1; }

# NCCL headers for VERSION into DIR/nccl/VERSION/include/nccl.h: a local copy (the CUDA toolkit's)
# when it is that version and, where its checksum is known, the wheel's very file; else the header
# from PyPI's nvidia-nccl-cu13 wheel of that version (pip download, ~200 MB, cached outside the carry).
carry_nccl_header() {
  local v=$1 dest=$carry/nccl/$1/include f ver src="" cache whl
  mkdir -p "$dest"
  for f in /usr/local/cuda/include/nccl.h /usr/local/cuda/targets/*/include/nccl.h /usr/include/nccl.h /usr/local/include/nccl.h; do
    [[ -f $f ]] || continue
    ver=$(awk '/^#define NCCL_(MAJOR|MINOR|PATCH) / {printf "%s%s", sep, $3; sep="."}' "$f")
    [[ $ver == "$v" ]] || continue
    if [[ -n ${NCCL_H_SHA256[$v]:-} && $(sha256 "$f") != "${NCCL_H_SHA256[$v]}" ]]; then continue; fi
    cp "$(readlink -f "$f")" "$dest/nccl.h" && src="local $f"
    break
  done
  if [[ -z $src ]]; then
    cache=${XDG_CACHE_HOME:-$HOME/.cache}/trainrt-gpu-check
    mkdir -p "$cache"
    say "no local nccl.h of NCCL $v: pip download nvidia-nccl-cu13==$v (~200 MB, kept in $cache)"
    python3 -m pip download --quiet --no-deps --only-binary=:all: --platform manylinux_2_18_x86_64 --python-version 3.12 \
      -d "$cache" "nvidia-nccl-cu13==$v" >>"$carry/download.log" 2>&1 ||
      die "pip download nvidia-nccl-cu13==$v failed: $(tail -2 "$carry/download.log")"
    whl=$(ls "$cache"/nvidia_nccl_cu13-"$v"-*.whl | head -1)
    python3 -c 'import sys, zipfile; open(sys.argv[2], "wb").write(zipfile.ZipFile(sys.argv[1]).read("nvidia/nccl/include/nccl.h"))' \
      "$whl" "$dest/nccl.h" || die "no nvidia/nccl/include/nccl.h in $whl"
    src="PyPI $(basename "$whl")"
  fi
  printf 'nccl/%s/include/nccl.h\t%s\t%s\t%s\n' "$v" "$v" "$src" "$(sha256 "$dest/nccl.h")" >>"$carry/CARRY.tsv"
}

prepare() {
  local limit=$TRAVEL_LIMIT_MIB nccl_versions=$NCCL_PINNED
  carry=$repo/gpu-carry
  while (($#)); do
    case $1 in
      --carry) carry=${2:?--carry DIR}; shift 2 ;;
      --limit-mib) limit=${2:?--limit-mib N}; shift 2 ;;
      --nccl-versions) nccl_versions=${2//,/ }; shift 2 ;;
      *) die "prepare: unknown argument '$1'" ;;
    esac
  done
  [[ $limit =~ ^[0-9]+$ ]] || die "prepare: --limit-mib '$limit' is not a whole number of MiB"
  local v
  for v in $nccl_versions; do [[ $v =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "prepare: --nccl-versions: '$v' is not a version like 2.28.9"; done
  command -v apt-get >/dev/null || die "prepare needs apt-get (a Debian 12 machine like the CPU one)"
  # A carry made before the marker moved up a level (it was in debs/) is still ours.
  [[ -e $carry/debs/.gpu-check-carry ]] && touch "$carry/.gpu-check-carry"
  fresh_dir "$carry" .gpu-check-carry
  mkdir -p "$carry/debs" "$carry/wheels"
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
      "$(dpkg-deb -f "$f" Architecture)" "$(stat -c %s "$f")" "$(sha256 "$f")" >>"$manifest"
  done
  local got p
  got=$(tail -n +2 "$manifest" | cut -f2 | sort | tr '\n' ' ')
  for p in "${CARRIED_PACKAGES[@]}"; do
    grep -qw -- "$p" <<<"$got" || die "package $p was not downloaded (got: $got)"
  done

  # The rest, one line each in CARRY.tsv (path in the carry, version, where from, sha256), which
  # `run` checks before using a file.
  printf 'path\tversion\tsource\tsha256\n' >"$carry/CARRY.tsv"
  local nb whl
  nb=$(nanobind_pin)
  [[ -n $nb ]] || die "no nanobind==VERSION pin found in scripts/python-env.sh"
  # Pure Python (py3-none-any): the same file serves the GPU image's python3 3.12.
  python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$carry/wheels" "nanobind==$nb" >>"$carry/download.log" 2>&1 ||
    die "pip download nanobind==$nb failed: $(tail -2 "$carry/download.log")"
  whl=$(ls "$carry"/wheels/nanobind-"$nb"-py3-none-any.whl 2>/dev/null | head -1)
  [[ -n $whl ]] || die "pip download nanobind==$nb gave no pure-Python wheel: $(ls "$carry/wheels")"
  printf 'wheels/%s\t%s\tPyPI (pin of scripts/python-env.sh)\t%s\n' "$(basename "$whl")" "$nb" "$(sha256 "$whl")" >>"$carry/CARRY.tsv"
  # pytest and what it needs, as Debian's python3-pytest on the CPU machine (the python.* tests
  # run under it; the GPU image may lack it). Pure Python, for the image's python3 3.12.
  local pt
  pt=$(dpkg-query -W -f='${Version}' python3-pytest 2>/dev/null | cut -d- -f1)
  python3 -m pip download --quiet --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
    -d "$carry/wheels/pytest" "pytest==${pt:-7.2.1}" >>"$carry/download.log" 2>&1 ||
    die "pip download pytest==${pt:-7.2.1} failed: $(tail -2 "$carry/download.log")"
  for whl in "$carry"/wheels/pytest/*.whl; do
    printf 'wheels/pytest/%s\t%s\tPyPI (pytest %s and its dependencies)\t%s\n' "$(basename "$whl")" \
      "$(basename "$whl" | cut -d- -f2)" "${pt:-7.2.1}" "$(sha256 "$whl")" >>"$carry/CARRY.tsv"
  done
  for v in $nccl_versions; do carry_nccl_header "$v"; done

  local total carry_bytes
  carry_bytes=$(du -sb "$carry" | cut -f1)
  total=$(travel_bytes "$carry")
  say "$(($(wc -l <"$manifest") - 1)) packages, nanobind $nb, nccl.h of NCCL ${nccl_versions// /, } in $carry ($((carry_bytes / 1024)) KiB); with the working tree $((total / 1024)) KiB of ${limit} MiB"
  ((total <= limit * 1024 * 1024)) || die "what would travel ($((total / 1024)) KiB) is over ${limit} MiB"
  say "prepared. On the GPU machine: the two device-tool calls of docs/gpu-check.md \"The plan\", one right after the other (carry: ${carry#"$repo"/})"
}
