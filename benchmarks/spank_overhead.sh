#!/usr/bin/env bash
# Cost of --train-runtime on a step: `srun -n 8 true` with and without the plugin, alternating
# (A B A B), on the local cluster in both topology modes. Prints medians, the ratio and the
# milliseconds the plugin adds. Run as root after `bash scripts/build.sh` (BUILD_DIR=<dir> and
# TRAINRT_BUILD_DIR=<dir> for another build folder).
# Cases: live discovery and its digested cache (`-n 8 -O`: Slurm allocates one core, so the plugin
# binds all 8 tasks to it; `-n 2`: one task per core), the ndv5 NCCL file, the largest real hwloc
# XML (turin, 270 KB) and a synthetic 1 MB hwloc XML (benchmarks/make_large_hwloc_xml.py clones the
# turin file's PCI subtrees that hold no GPU or NIC), each XML also through its digested cache.
# Usage: benchmarks/spank_overhead.sh [PAIRS=20]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
pairs=${1:-20}
cluster=$repo/slurm_examples/local-cluster/cluster.sh
export TRAINRT_CLUSTER_DIR=/tmp/trainrt-bench-cluster TRAINRT_SLURMCTLD_PORT=7017 TRAINRT_SLURMD_PORT=7018
export SLURM_CONF=$TRAINRT_CLUSTER_DIR/slurm.conf
trap 'bash "$cluster" stop >/dev/null 2>&1' EXIT

measure() {  # measure LABEL PLAIN_ARGS -- PLUGIN_ARGS
  local label=$1; shift
  local -a plain=() plug=()
  while [[ $1 != -- ]]; do plain+=("$1"); shift; done; shift
  plug=("$@")
  python3 - "$label" "$pairs" "${#plain[@]}" "${plain[@]}" "${plug[@]}" <<'PY'
import statistics, subprocess, sys, time
label, pairs, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
plain, plug = sys.argv[4:4 + n], sys.argv[4 + n:]
def run(cmd):
    t = time.perf_counter(); subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return (time.perf_counter() - t) * 1000
run(plain); run(plug)  # warm the page cache and the daemons
a, b = [], []
for _ in range(pairs):
    a.append(run(plain)); b.append(run(plug))
ma, mb = statistics.median(a), statistics.median(b)
print(f"{label:<34} plain {ma:7.1f} ms   --train-runtime {mb:7.1f} ms   ratio {mb / ma:.3f}x   adds {mb - ma:+.1f} ms   ({pairs} pairs, medians)")
PY
}

cache=/run/train-runtime/topology.cache  # the plugin's default digested-topology path
[[ -e $cache ]] && { echo "$cache exists: not touching it (move it away to run this benchmark)"; exit 1; }
# The NCCL topology --write-cache puts beside it (topology.nccl.xml) goes with it.
mkdir -p /run/train-runtime && chmod 755 /run/train-runtime
drop_cache() { rm -f "$cache" "${cache%.cache}.nccl.xml"; }
trap 'drop_cache; bash "$cluster" stop >/dev/null 2>&1' EXIT
echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
topo=${BUILD_DIR:-$repo/build}/topology/trainrt-topo

bash "$cluster" start --mode live >/dev/null 2>&1
measure "live hwloc, srun -n 8 true" srun -n 8 -O true -- srun -n 8 -O --train-runtime=policy=numa true
"$topo" --write-cache "$cache" >/dev/null
measure "live, digested cache, srun -n 8 true" srun -n 8 -O true -- srun -n 8 -O --train-runtime=policy=numa true
# The same without binding: what the 8 tasks on the one allocated core cost beyond the plugin's work.
measure "live, digested cache, -n 8, bind=off" srun -n 8 -O true -- srun -n 8 -O --train-runtime=policy=numa,bind=off true
measure "live, digested cache, srun -n 2 true" srun -n 2 true -- srun -n 2 --train-runtime=policy=numa true
drop_cache
measure "live hwloc, srun -n 2 true" srun -n 2 true -- srun -n 2 --train-runtime=policy=numa true
bash "$cluster" stop >/dev/null 2>&1
xml=$repo/../shared/topologies/nccl-azure-ndv5-8xH100-8xNDR.xml
if [[ -f $xml ]]; then
  bash "$cluster" start --mode xml --xml "$xml" >/dev/null 2>&1
  measure "cached XML (ndv5, 8 GPUs), -n 8" srun -n 8 --gpus-per-task=1 true -- srun -n 8 --gpus-per-task=1 --train-runtime true
  turin=$repo/../shared/topologies/hwloc-lenovo-sd665nv3-turin-4xH200-4xCX7.xml
  bash "$cluster" stop >/dev/null 2>&1
  bash "$cluster" start --mode xml --xml "$turin" >/dev/null 2>&1
  measure "cached XML (turin hwloc 270 KB), -n 4" srun -n 4 --gpus-per-task=1 true -- srun -n 4 --gpus-per-task=1 --train-runtime true
  # The same XML digested once into the topology cache (what an admin writes once per boot); the
  # cache names its source by the path the plugin is given, which cluster.sh makes absolute.
  "$topo" --xml "$(realpath "$turin")" --write-cache "$cache" >/dev/null
  measure "digested cache of the turin XML, -n 4" srun -n 4 --gpus-per-task=1 true -- srun -n 4 --gpus-per-task=1 --train-runtime true
  drop_cache
  big=$(mktemp -d)/hwloc-synthetic-1mb.xml
  trap 'drop_cache; rm -rf "$(dirname "$big")"; bash "$cluster" stop >/dev/null 2>&1' EXIT
  /usr/bin/python3 "$repo/benchmarks/make_large_hwloc_xml.py" "$turin" "$big" $((1 << 20)) >/dev/null
  bash "$cluster" stop >/dev/null 2>&1
  bash "$cluster" start --mode xml --xml "$big" >/dev/null 2>&1
  measure "synthetic 1 MB hwloc XML, -n 4" srun -n 4 --gpus-per-task=1 true -- srun -n 4 --gpus-per-task=1 --train-runtime true
  "$topo" --xml "$big" --write-cache "$cache" >/dev/null
  measure "digested cache of the 1 MB XML, -n 4" srun -n 4 --gpus-per-task=1 true -- srun -n 4 --gpus-per-task=1 --train-runtime true
fi
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
