#!/usr/bin/env bash
# GPU nodes with Arm CPUs exist (Grace Hopper): every portable source must compile for aarch64.
# Compiles each with Debian's aarch64 cross compiler (-fsyntax-only, against this machine's
# architecture-independent library headers); sources that need CUDA, NCCL or Gloo are left out.
# Usage: aarch64_syntax.sh SOURCE_DIR
set -uo pipefail
src=$(cd "$1" && pwd)
cxx=aarch64-linux-gnu-g++
command -v $cxx >/dev/null || { echo "FAIL: $cxx is missing (scripts/install-deps.sh installs g++-aarch64-linux-gnu)"; exit 1; }
shim=$(mktemp -d)
trap 'rm -rf "$shim"' EXIT
for h in fmt nlohmann CLI catch2 hwloc hwloc.h pugixml.hpp pugiconfig.hpp xxhash.h xxh3.h slurm; do
  [[ -e /usr/include/$h ]] && ln -s "/usr/include/$h" "$shim/$h"
done
# hwloc's generated config lives in the multiarch folder; its x86-64 copy stands in for syntax.
mkdir -p "$shim/arch/hwloc" && ln -s /usr/include/x86_64-linux-gnu/hwloc/autogen "$shim/arch/hwloc/autogen"
cd "$src"
incs=(-Icommon/include -Itopology/include -Itopology/src -Ispank_plugin/src -Ipmix_bootstrap/include
      -Ipmix_bootstrap/src -Ikernels/include -Icheckpoint/include -Icheckpoint/src -Iruntime/include -Iruntime/src -Idoctor/include -isystem "$shim/arch" -isystem "$shim")
n=0 failed=0
for f in common/*.cpp topology/src/*.cpp topology/tools/*.cpp spank_plugin/src/*.cpp pmix_bootstrap/src/open_session.cpp \
         pmix_bootstrap/src/single_session.cpp kernels/src/cpu_kernels.cpp checkpoint/src/*.cpp checkpoint/tools/*.cpp \
         runtime/src/*.cpp doctor/src/*.cpp doctor/tools/*.cpp; do
  case $f in *nccl_communicator.cpp | *gloo_communicator.cpp | *hierarchical_communicator.cpp) continue ;; esac
  n=$((n + 1))
  if ! out=$($cxx -std=c++20 -fsyntax-only -DFMT_HEADER_ONLY "${incs[@]}" "$f" 2>&1); then
    failed=$((failed + 1))
    echo "FAIL: $f"
    head -5 <<<"$out"
  fi
done
echo "aarch64 syntax: $((n - failed)) passed, $failed failed"
exit $((failed > 0))
