#!/usr/bin/env bash
# A real Slurm cluster on this machine (munge + slurmctld + slurmd from Debian) with the
# train-runtime plugin in its plugstack. Run as root.
#
#   cluster.sh start [--mode live|xml] [--xml FILE] [--plugin SO] [--plugin-args "k=v ..."]
#   cluster.sh stop
#   cluster.sh env        # prints `export SLURM_CONF=...` for clients
#
# The node is named after this host, so MASTER_ADDR resolves.
# live: one node with this machine's real CPUs (slurmd -C) and no GPUs; tasks are really bound.
# xml:  one node claiming the CPUs and GPUs of a real GPU server's topology file (default: Azure
#       ND H100 v5, 96 CPUs, 8 GPUs), fake GPU device files via gres.conf, topology_xml=FILE in the
#       plugstack, so the plugin computes and exports the real server's placement (bind=dry).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
dir=${TRAINRT_CLUSTER_DIR:-/tmp/trainrt-cluster}
conf=$dir/slurm.conf

log() { echo "cluster: $*" >&2; }
die() { echo "cluster: error: $*" >&2; exit 1; }

install_packages() {
  local need=()
  for p in slurm-wlm slurmctld slurmd slurm-client munge libslurm-dev libpmix-dev; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
  done
  ((${#need[@]} == 0)) && return 0
  [[ $(id -u) -eq 0 ]] || die "packages missing (${need[*]}) and not root"
  log "installing ${need[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
}

stop_pidfile() {  # stop_pidfile FILE NAME
  local f=$1 pid
  [[ -f $f ]] || return 0
  pid=$(cat "$f" 2>/dev/null || true)
  if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
    log "stopped $2 (pid $pid)"
  fi
  rm -f "$f"
}

cmd_stop() {
  for f in "$dir"/slurmd-*.pid; do stop_pidfile "$f" slurmd; done
  stop_pidfile "$dir/slurmctld.pid" slurmctld
  stop_pidfile "$dir/munge/munged.pid" munged
}

xml_node_line() {  # CPU and GPU counts of a topology file, as a slurm.conf node line
  local topo=$1 json cpus gpus numa
  json=$("$repo/build/topology/trainrt-topo" --xml "$topo" --policy none --tasks 1 --format json) ||
    die "cannot read topology $topo"
  cpus=$(python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["node"]["cores"])' <<<"$json")
  gpus=$(python3 -c 'import json,sys; d=json.load(sys.stdin); print(len(d["gpus"]))' <<<"$json")
  echo "CPUs=$cpus Sockets=1 CoresPerSocket=$cpus ThreadsPerCore=1 RealMemory=4096 Gres=gpu:$gpus"
  echo "$gpus" > "$dir/gpu-count"
}

cmd_start() {
  local mode=xml topo="" plugin="$repo/build/spank_plugin/train_runtime.so" plugin_args=""
  while (($#)); do
    case $1 in
      --mode) mode=$2; shift 2 ;;
      --xml) topo=$2; shift 2 ;;
      --plugin) plugin=$2; shift 2 ;;
      --plugin-args) plugin_args=$2; shift 2 ;;
      *) die "unknown argument '$1' (see the header of $0)" ;;
    esac
  done
  [[ $mode == live || $mode == xml ]] || die "unknown mode '$mode'; valid: live, xml"
  [[ -f $plugin ]] || die "plugin $plugin not found; build first (bash scripts/build.sh)"
  install_packages
  cmd_stop
  rm -rf "$dir"
  mkdir -p "$dir"/{state,munge,dev} && chmod 755 "$dir" "$dir/munge"

  # munge with its own key and socket, so it never touches a system munged.
  dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
  chmod 400 "$dir/munge/munge.key"
  munged --force --socket="$dir/munge/munge.socket.2" --key-file="$dir/munge/munge.key" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" --seed-file="$dir/munge/munged.seed"

  local node_line node
  node=$(hostname -s)  # so MASTER_ADDR (the first node's name) resolves
  if [[ $mode == live ]]; then
    node_line=$(slurmd -C | head -1 | sed -E 's/^NodeName=[^ ]+ //; s/ UpTime.*//')
    echo 0 > "$dir/gpu-count"
  else
    topo=${topo:-$repo/../shared/topologies/nccl-azure-ndv5-8xH100-8xNDR.xml}
    [[ -f $topo ]] || die "topology file $topo not found"
    topo=$(cd "$(dirname "$topo")" && pwd)/$(basename "$topo")
    node_line=$(xml_node_line "$topo")
    plugin_args="topology_xml=$topo $plugin_args"
    local n; n=$(cat "$dir/gpu-count")
    for ((i = 0; i < n; i++)); do mknod "$dir/dev/fakegpu$i" c 1 3; done
  fi
  # A private copy, replaced by rename: srun and slurmstepd reload the .so for every step.
  cp "$plugin" "$dir/train_runtime.so.new" && mv "$dir/train_runtime.so.new" "$dir/train_runtime.so"
  echo "required $dir/train_runtime.so $plugin_args" > "$dir/plugstack.conf"

  cat > "$conf" <<CONF
ClusterName=trainrt
SlurmctldHost=$(hostname)(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket.2
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
GresTypes=gpu
MpiDefault=none
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool-%n
TmpFS=$dir/tmp-%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd-%n.log
SlurmctldPort=${TRAINRT_SLURMCTLD_PORT:-6817}
SlurmdPort=${TRAINRT_SLURMD_PORT:-6818}
PlugStackConfig=$dir/plugstack.conf
ReturnToService=2
KillWait=3
MinJobAge=2
InactiveLimit=0
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
NodeName=$node NodeAddr=127.0.0.1 $node_line State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
  local n; n=$(cat "$dir/gpu-count")
  {
    echo "AutoDetect=off"
    ((n > 0)) && echo "NodeName=$node Name=gpu File=$dir/dev/fakegpu[0-$((n - 1))]"
  } > "$dir/gres.conf"
  mkdir -p "$dir/spool-$node" "$dir/tmp-$node"

  export SLURM_CONF=$conf
  slurmctld -f "$conf"
  slurmd -f "$conf"
  for _ in $(seq 1 100); do
    sinfo -h -o '%T' 2>/dev/null | grep -qE '^(idle|mixed|allocated)' && break
    sleep 0.1
  done
  sinfo -h -o '%T' | grep -qE '^(idle|mixed|allocated)' || { tail -20 "$dir/slurmd-$node.log" "$dir/slurmctld.log" >&2; die "node did not come up"; }
  log "up: mode=$mode, node $node: $node_line"
  log "clients need: export SLURM_CONF=$conf"
}

case ${1:-} in
  start) shift; cmd_start "$@" ;;
  stop) cmd_stop ;;
  env) echo "export SLURM_CONF=$conf" ;;
  *) die "usage: $0 start [--mode live|xml] [--xml FILE] [--plugin SO] [--plugin-args ARGS] | stop | env" ;;
esac
