#!/usr/bin/env bash
# Set up and run the main job: install, build, then place ranks on this node and on a real
# 4xH200 server's topology.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
topo=./build/topology/trainrt-topo
echo
echo "== this node (live hwloc): 2 CPU-only ranks, policy numa"
"$topo" --policy numa --tasks 2
shared=../shared/topologies/hwloc-lenovo-sd665nv3-turin-4xH200-4xCX7.xml
if [[ -f $shared ]]; then
  echo
  echo "== a Lenovo SD665-N V3 (4x H200, 4x ConnectX-7), one rank per GPU"
  "$topo" --xml "$shared"
fi
