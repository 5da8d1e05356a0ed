#!/usr/bin/env bash
# The whole test suite: install what is missing, build, run every CTest label.
# Usage: bash scripts/test.sh [extra ctest args, e.g. -L unit]
# Every optional part this kind of machine has (Slurm, PMIx, Gloo, CUDA, NCCL, Python) is configured ON, so
# a part whose dependency went missing fails configure instead of silently dropping out of the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
parts=(-DTRAINRT_WITH_SLURM=ON -DTRAINRT_WITH_PMIX=ON -DTRAINRT_WITH_GLOO=ON -DTRAINRT_WITH_CUDA=ON -DTRAINRT_WITH_NCCL=ON -DTRAINRT_WITH_PYTHON=ON)
bash scripts/build.sh "${parts[@]}"
cd "${BUILD_DIR:-build}"
# This is CI's suite: a test whose requirement the install step provides (torch 2.x for the
# torch2 tests) fails instead of skipping when it finds it missing (tests/python/_mp_driver.py).
export CI=${CI:-true}
ctest --output-on-failure --timeout 600 "$@"
