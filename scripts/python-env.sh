#!/usr/bin/env bash
# The Python environment the trainrt module is built and tested with: a venv on Debian's own
# python3 (/usr/bin/python3) with --system-site-packages, so Debian's torch, numpy and pytest stay
# importable, plus the pinned build tools pip brings from PyPI (nanobind, scikit-build-core).
# Then PyTorch 2.x from PyPI (scripts/python-torch.sh; TRAINRT_NO_TORCH=1 skips it).
# Idempotent: an existing venv with the pinned versions is left as it is.
#   TRAINRT_PYENV   where the venv lives (default /opt/train-runtime/pyenv; CMake looks there too)
#   PYTHON          the base interpreter (default /usr/bin/python3)
set -euo pipefail
env_dir=${TRAINRT_PYENV:-/opt/train-runtime/pyenv}
base=${PYTHON:-/usr/bin/python3}
# Pinned: the binding's C++ API and the pyproject's keys were written against these.
pins=(nanobind==2.9.2 scikit-build-core==0.11.6)

have_pins() {
  "$env_dir/bin/python" - "${pins[@]}" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
for pin in sys.argv[1:]:
    name, want = pin.split("==")
    if version(name) != want:
        sys.exit(1)
PY
}

here=$(dirname "$0")
if [[ -x $env_dir/bin/python ]] && have_pins; then
  echo "python-env: $env_dir ready (${pins[*]})"
  TRAINRT_PYENV=$env_dir bash "$here/python-torch.sh"
  exit 0
fi
if ! "$base" -c 'import venv, ensurepip' 2>/dev/null; then
  echo "python-env: $base has no venv/ensurepip: install python3-venv" >&2
  exit 1
fi
mkdir -p "$(dirname "$env_dir")"
[[ -x $env_dir/bin/python ]] || "$base" -m venv --system-site-packages "$env_dir"
"$env_dir/bin/python" -m pip install --quiet --disable-pip-version-check "${pins[@]}"
echo "python-env: $env_dir ready (${pins[*]})"
TRAINRT_PYENV=$env_dir bash "$here/python-torch.sh"
