#!/usr/bin/env bash
# Configures and builds into ./build (override with BUILD_DIR). Extra arguments go to cmake's
# configure step, e.g. `bash scripts/build.sh -DTRAINRT_WITH_CUDA=OFF`.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
generator=()
[[ -f $build/CMakeCache.txt ]] || ! command -v ninja >/dev/null || generator=(-G Ninja)
cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE:-RelWithDebInfo} "$@" |
  grep -E "train-runtime part|Error|error|Warning" || true
cmake --build "$build" -j "$(nproc)"
