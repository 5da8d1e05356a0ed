#!/usr/bin/env bash
# PyTorch DCP with FileSystemWriter/Reader against trainrt.dcp.Writer/Reader (benchmarks/dcp_bench.py):
# the same state and run, at 2 and 4 ranks. Figures: docs/performance-checkpoints.md "PyTorch DCP storage".
#   bash benchmarks/dcp_bench.sh [BUILD_DIR] [MIB_PER_RANK] [REPS]
# Needs torch 2.x in the Python the module was built for (scripts/python-torch.sh), mpirun, and
# root for the cold-cache loads (drop_caches; skipped otherwise). Writes under $TMPDIR.
set -euo pipefail
build=${1:-build}
mib=${2:-1024}
reps=${3:-2}
here=$(cd "$(dirname "$0")" && pwd)
py=$(sed -n 's/^TRAINRT_PYTHON_EXECUTABLE:[A-Z]*=//p; s/^Python_EXECUTABLE:[A-Z]*=//p' "$build/CMakeCache.txt" | head -1)
[[ -x $py ]] || { echo "dcp_bench: no Python in $build/CMakeCache.txt" >&2; exit 1; }
export PYTHONPATH=$(cd "$build" && pwd)/python
work=$(mktemp -d "${TMPDIR:-/tmp}/dcp-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
for np in 2 4; do
  mpirun --allow-run-as-root --oversubscribe -x PYTHONPATH -np "$np" \
    "$py" "$here/dcp_bench.py" "$work/np$np" --mib-per-rank "$mib" --reps "$reps"
  rm -rf "${work:?}/np$np"
done
