#!/usr/bin/env bash
# The whole test suite: install what is missing, build, run every CTest label.
# Usage: bash scripts/test.sh [extra ctest args, e.g. -L unit]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
cd "${BUILD_DIR:-build}"
ctest --output-on-failure --timeout 600 "$@"
