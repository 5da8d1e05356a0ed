#!/usr/bin/env bash
# Sharded state restored at another world size against a same-layout restore of the same bytes,
# in one run, alternating A B A B, the page cache dropped before every restore (root):
# time (slowest rank), bytes read from files over all ranks per byte of state, and the largest
# rise of a rank's peak RSS during the restore (docs/performance-checkpoints.md "Resharded restore").
# Usage: benchmarks/reshard.sh [BUILD_DIR] [MIB_PER_SAVING_RANK] [REPEATS]
set -euo pipefail
build=$(cd "${1:-build}" && pwd)
mib=${2:-256} repeats=${3:-2}
bench=$build/benchmarks/reshard-bench
[[ -x $bench ]] || { echo "reshard.sh: $bench is not built (bash scripts/build.sh)"; exit 1; }
[[ $(id -u) -eq 0 ]] || { echo "reshard.sh: dropping the page cache needs root"; exit 1; }
dir=$(mktemp -d "$build/reshard-bench.XXXXXX")
trap 'rm -rf "$dir"' EXIT
mpi() { mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$@"; }
cold() { sync; echo 3 >/proc/sys/vm/drop_caches; }
echo "# $(date -u +%FT%TZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); $mib MiB per saving rank"
"$bench" fingerprint --mib 512 | tail -1
for saved in 4 8; do
  per=$(( mib * 4 / saved ))  # the same total state for both saves
  rm -rf "$dir/c"; mpi "$saved" "$bench" save "$dir/c" --mib "$per"
  targets=(3 6); ((saved == 8)) && targets=(2)
  for ((r = 0; r < repeats; ++r)); do
    for n in "$saved" "${targets[@]}"; do
      cold
      mpi "$n" "$bench" restore "$dir/c" --mib "$per" --saved-by "$saved"
    done
  done
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
