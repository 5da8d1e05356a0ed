# Sourced by the Slurm test scripts: a private cluster (by directory and ports), a scratch folder
# that is the working directory, cleanup on exit, and pass/fail counting.
#   cluster_harness NAME CTLD_PORT SLURMD_PORT   (needs $cluster and $build set)
cluster_harness() {
  # The cluster runs the plugin of the build under test, wherever that build folder is.
  export TRAINRT_BUILD_DIR=$build
  export TRAINRT_CLUSTER_DIR=/tmp/trainrt-$1-cluster-$$ TRAINRT_SLURMCTLD_PORT=$2 TRAINRT_SLURMD_PORT=$3
  export SLURM_CONF=$TRAINRT_CLUSTER_DIR/slurm.conf
  work=$(mktemp -d)
  cd "$work" || exit 1
  trap 'bash "$cluster" stop >/dev/null 2>&1; rm -rf "$work" "$TRAINRT_CLUSTER_DIR"' EXIT
  passed=0 failed=0 mark=$SECONDS
}
# Each line says how long it took since the previous one (cluster starts included): the way to
# see which check a slow run spent its time in.
pass() { echo "ok: $1 [$((SECONDS - mark)) s]"; passed=$((passed + 1)); mark=$SECONDS; }
fail() { echo "FAIL: $1 [$((SECONDS - mark)) s]"; shift; printf '  %s\n' "$@"; failed=$((failed + 1)); mark=$SECONDS; }
