#!/usr/bin/env bash
# PyTorch 2.x from PyPI in the project venv (scripts/python-env.sh calls this): the DTensor, FSDP2
# and DCP tests (tests/python/*torch2*) need it, and Debian's python3-torch 1.13 has none of them.
#
# PyPI has no CPU-only torch for Linux x86_64: its wheel is the CUDA build (530 MB), and its
# declared dependencies add 2.2 GB of NVIDIA, CUDA and triton wheels (19 of them). The tests run
# on the CPU, and this kind of machine already has the CUDA 13 toolkit's libraries on the loader
# path, so the wheel goes in with --no-deps, plus its pure-Python dependencies and the three
# libraries libtorch links that the toolkit does not ship (cuFile, cuSPARSELt, NVSHMEM: 232 MB).
# When `import torch` still fails (a machine without the toolkit), the full dependency set is
# installed instead. Either way the script ends by proving torch 2.x imports, DCP imports and
# a one-rank gloo process group runs a collective; it fails otherwise.
#   TRAINRT_PYENV     the venv (default /opt/train-runtime/pyenv)
#   TRAINRT_NO_TORCH  set to 1 to skip (a machine that only builds)
set -euo pipefail
env_dir=${TRAINRT_PYENV:-/opt/train-runtime/pyenv}
py=$env_dir/bin/python
torch_pin=torch==2.11.0
# torch 2.11.0's own requirements (its METADATA), less the NVIDIA and triton wheels.
pure=("typing-extensions>=4.10.0" "sympy>=1.13.3" "networkx>=2.5.1" jinja2 "fsspec>=0.8.5" filelock "setuptools<82")
# What libtorch_cuda.so links beyond the CUDA 13 toolkit, at the versions torch 2.11.0 pins.
native=(nvidia-cufile==1.15.1.6 nvidia-cusparselt-cu13==0.8.0 nvidia-nvshmem-cu13==3.4.5)

if [[ ${TRAINRT_NO_TORCH:-0} == 1 ]]; then
  echo "python-torch: skipped (TRAINRT_NO_TORCH=1)"
  exit 0
fi

check() {
  "$py" - <<'PY'
import datetime, os, sys, tempfile
import torch
major = int(torch.__version__.split(".")[0])
if major < 2:
    sys.exit(f"torch {torch.__version__} is imported from {torch.__file__}, not 2.x")
import torch.distributed as dist
import torch.distributed.checkpoint as dcp  # noqa: F401
from torch.distributed.tensor import DTensor  # noqa: F401
from torch.distributed.fsdp import fully_shard  # noqa: F401
if not dist.is_gloo_available():
    sys.exit("torch.distributed has no gloo backend")
store = dist.HashStore()
dist.init_process_group("gloo", store=store, rank=0, world_size=1, timeout=datetime.timedelta(seconds=30))
t = torch.ones(3)
dist.all_reduce(t)
dist.destroy_process_group()
print(f"python-torch: torch {torch.__version__} ({os.path.dirname(torch.__file__)}): DCP, DTensor, FSDP2, gloo ok")
PY
}

pip() { "$py" -m pip install --quiet --disable-pip-version-check "$@"; }

if [[ ! -x $py ]]; then
  echo "python-torch: no venv at $env_dir (run scripts/python-env.sh)" >&2
  exit 1
fi
if "$py" -c "import importlib.metadata as m, sys; sys.exit(m.version('torch') != '${torch_pin#torch==}')" 2>/dev/null &&
   check 2>/dev/null; then
  exit 0
fi
start=$SECONDS
pip "${pure[@]}"
pip --no-deps "$torch_pin" "${native[@]}"
err=$(mktemp)
trap 'rm -f "$err"' EXIT
if ! check 2>"$err"; then
  echo "python-torch: the CPU-lean install does not import ($(tail -1 "$err")); installing" \
       "$torch_pin with its full dependencies" >&2
  pip "$torch_pin"
  check
fi
echo "python-torch: installed $torch_pin into $env_dir in $((SECONDS - start)) s"
