#!/usr/bin/env bash
# trainrt.checkpoint vs torch.save vs DCP save/async_save from Python, same process, same tensors
# (benchmarks/python_checkpoint.py), RANKS ranks under mpirun. Benchmark only: not run by CI.
#
#   benchmarks/python_checkpoint.sh [BUILD_DIR=build] [RANKS=2] [-- python_checkpoint.py options]
#   e.g. benchmarks/python_checkpoint.sh build-torch 2 --mib 1024 --reps 3 --dir /var/tmp/pyckb
#
# TORCH_PYTHON: the interpreter. Default /opt/train-runtime/bench-torch/bin/python, a venv on
# Debian's python3 (the ABI the module is built for) with a torch that has DCP async_save:
#   /usr/bin/python3 -m venv /opt/train-runtime/bench-torch && /opt/train-runtime/bench-torch/bin/pip install torch numpy
# (about 5 GiB with PyPI's CUDA wheels, ~3 minutes here). Without it, Debian's /usr/bin/python3
# (torch 1.13) is used and the DCP rows print n/a.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$repo/build}" && pwd)
ranks=${2:-2}
shift $(($# < 2 ? $# : 2))
[[ ${1:-} == -- ]] && shift
py=${TORCH_PYTHON:-/opt/train-runtime/bench-torch/bin/python}
[[ -x $py ]] || { echo "python_checkpoint: $py missing, using Debian's /usr/bin/python3 (torch 1.13, no DCP)" >&2; py=/usr/bin/python3; }
compgen -G "$build/python/trainrt/_trainrt*.so" >/dev/null ||
  { echo "python_checkpoint: no trainrt module in $build/python (configure with -DTRAINRT_WITH_PYTHON=ON, build _trainrt)" >&2; exit 2; }
export PYTHONPATH=$build/python OMP_NUM_THREADS=1
exec mpirun --allow-run-as-root --oversubscribe -np "$ranks" -x PYTHONPATH -x OMP_NUM_THREADS \
  "$py" "$repo/benchmarks/python_checkpoint.py" "$@"
