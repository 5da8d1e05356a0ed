#!/usr/bin/env bash
# Installs the Debian packages train-runtime builds and tests with. Idempotent; needs root.
#   install-deps.sh          install what is missing
#   install-deps.sh --list   print the package names (scripts/check-deps.py compares the build with them)
set -euo pipefail

packages=(
  cmake g++ make pkg-config git
  libhwloc-dev hwloc libhwloc-plugins libfmt-dev nlohmann-json3-dev libpugixml-dev libcli11-dev catch2 python3
  # checkpoint checksums (XXH3)
  libxxhash-dev
  # the SPANK plugin and the real local Slurm cluster its tests run on
  libslurm-dev slurm-wlm slurmctld slurmd slurm-client munge libpmix-dev iproute2
  # multi-process tests under mpirun (a PMIx server) and the Open MPI benchmark peer
  openmpi-bin libopenmpi-dev
  # host collectives across nodes
  libgloo-dev
  # the launch-contract test: a PyTorch script (CPU) under srun --train-runtime, the torchrun way
  python3-torch
  # the trainrt Python module: built against Debian's Python, tested in a fresh venv (pip install .)
  python3-dev python3-venv python3-numpy
  # its tests run under pytest (tests/python; the venv sees Debian's packages)
  python3-pytest
  # the culprit finder's metrics: the .prom file is parsed with prometheus_client's own parser
  python3-prometheus-client
  # the build (Ninja) and the Debian packages (CPack runs dpkg-shlibdeps from dpkg-dev)
  ninja-build dpkg-dev file
  # the aarch64 compile check of the portable sources (Grace Hopper nodes)
  g++-aarch64-linux-gnu
  # benchmarks/scale.sh: its arithmetic (bc) and the local cluster's link delays (iptables)
  bc iptables
)
if [[ ${1:-} == --list ]]; then
  printf '%s\n' "${packages[@]}"
  exit 0
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages present"
  bash "$(dirname "$0")/python-env.sh"  # the venv with nanobind for the Python module (idempotent)
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "install-deps: missing packages (${missing[*]}) and not root; run as root or install them" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
bash "$(dirname "$0")/python-env.sh"  # the venv with nanobind for the Python module (idempotent)
