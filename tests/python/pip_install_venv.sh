#!/usr/bin/env bash
# `pip install <repo>` into a fresh virtual environment on Debian's python3 (build requirements,
# scikit-build-core and nanobind, from PyPI through pip's build isolation), then, outside the
# repository, import trainrt from the venv and checkpoint one step and restore it bitwise.
# Exit 77 (SKIPPED) when PyPI cannot be reached.
# Usage: pip_install_venv.sh REPO [BASE_PYTHON]
set -euo pipefail
repo=$(cd "$1" && pwd)
base=${2:-/usr/bin/python3}
work=$(mktemp -d /tmp/trainrt-pip-XXXXXX)
trap 'rm -rf "$work"' EXIT

if ! "$base" - <<'PY'
import urllib.request, sys
try:
    urllib.request.urlopen("https://pypi.org/simple/scikit-build-core/", timeout=15).read(1)
except Exception as e:
    print(f"PyPI unreachable: {e}")
    sys.exit(1)
PY
then
  echo "SKIPPED: PyPI cannot be reached; pip cannot fetch the build requirements"
  exit 77
fi

"$base" -m venv --system-site-packages "$work/venv"
start=$(date +%s)
# One compile job: the machine is shared (override with CMAKE_BUILD_PARALLEL_LEVEL).
if ! CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-1} \
     "$work/venv/bin/pip" install --no-cache-dir --disable-pip-version-check "$repo" >"$work/pip.log" 2>&1; then
  tail -60 "$work/pip.log"
  echo "FAIL: pip install $repo"
  exit 1
fi
echo "pip install took $(( $(date +%s) - start )) s"
grep -E "train-runtime part" "$work/pip.log" || true

cd "$work"   # not the repository: the import must come from the venv
env -u PYTHONPATH "$work/venv/bin/python" - "$work" <<'PY'
import os, sys
import numpy as np
import trainrt
from trainrt import checkpoint

venv = os.path.join(sys.argv[1], "venv")
assert trainrt.__file__.startswith(venv), f"trainrt imported from {trainrt.__file__}, not the venv"
ext = trainrt._trainrt.__file__
lib = os.path.join(os.path.dirname(ext), "libtrainrt.so.0")
assert os.path.exists(lib), "libtrainrt.so.0 is not in the wheel"
maps = open("/proc/self/maps").read()
assert lib in maps, "the extension did not load the wheel's libtrainrt"
pkg = os.path.dirname(trainrt.__file__)
for typed in ("py.typed", "_trainrt.pyi"):  # PEP 561: the package and its extension are typed
    assert os.path.isfile(os.path.join(pkg, typed)), f"{typed} is not in the wheel"

world = trainrt.init(quiet=True)
assert world.world_size == 1
d = os.path.join(sys.argv[1], "ckpt")
a = np.random.default_rng(1).standard_normal(12345)
want = a.copy()
m = checkpoint.Manager(d)
m.register("a", a)
m.save(4, {"from": "pip"})
assert m.wait().step == 4
a[:] = 0
assert m.restore() == 4 and a.tobytes() == want.tobytes()
assert m.restored_metadata == {"from": "pip"}
m.close()
assert checkpoint.verify(d).intact
print(f"trainrt {trainrt.__version__} from {os.path.dirname(trainrt.__file__)}: save/restore OK "
      f"(CUDA {'in' if trainrt.has_cuda else 'not in'} this build)")
PY
