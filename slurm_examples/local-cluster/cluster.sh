#!/usr/bin/env bash
# A real Slurm cluster on this machine (munge + slurmctld + slurmd from Debian) with the
# train-runtime plugin in its plugstack. Run as root.
#
#   cluster.sh start [--mode live|xml] [--xml FILE] [--nodes N] [--build DIR] [--plugin SO] [--plugin-args "k=v ..."]
#   cluster.sh stop
#   cluster.sh env        # prints `export SLURM_CONF=...` for clients
#   cluster.sh run CMD... # runs a client command (srun, sbatch, ...) where the controller is
#
# --build DIR: the build folder whose plugin and trainrt-topo the cluster uses (default
#       $TRAINRT_BUILD_DIR, else <repo>/build); --plugin SO names another plugin file.
# --task-plugin affinity: Slurm binds tasks itself (task/affinity, live mode only: with faked CPUs its
#       masks are wrong), as sites do; the plugin then places within Slurm's binding.
# --system-plugstack: use /etc/slurm/plugstack.conf (the installed package's plugstack.conf.d line)
#       instead of the build's plugin.
# --nodes N (N >= 2, live mode): N nodes on this machine, each slurmd in its own network namespace
#       (trt-n1..N, 10.77.0.11+) behind a bridge in the controller's namespace (trt-ctl, 10.77.0.1);
#       /etc/hosts gets their names (removed by stop). Clients must run via `cluster.sh run`.
# The single node is named after this host, so MASTER_ADDR resolves.
# live: one node with this machine's real CPUs (slurmd -C) and no GPUs; tasks are really bound.
# xml:  one node claiming the CPUs and GPUs of a real GPU server's topology file (default: Azure
#       ND H100 v5, 96 CPUs, 8 GPUs), fake GPU device files via gres.conf, topology_xml=FILE in the
#       plugstack, so the plugin computes and exports the real server's placement (bind=dry).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
dir=${TRAINRT_CLUSTER_DIR:-/tmp/trainrt-cluster}
build=${TRAINRT_BUILD_DIR:-$repo/build}
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
  if [[ -f $dir/netns ]]; then
    for ns in $(cat "$dir/netns"); do ip netns del "$ns" 2>/dev/null || true; done
    sed -i '/# trainrt-local-cluster$/d' /etc/hosts
    rm -f "$dir/netns"
    log "removed network namespaces"
  fi
}

# One bridge in the controller's namespace, one veth per node namespace.
make_namespaces() {  # make_namespaces N
  local n=$1 i
  # Namespace names are machine-wide: clear any a crashed run left behind.
  for ns in $(ip netns list | awk '/^trt-(ctl|n[0-9]+)( |$)/ {print $1}'); do ip netns del "$ns"; done
  sed -i '/# trainrt-local-cluster$/d' /etc/hosts
  ip netns add trt-ctl
  echo trt-ctl > "$dir/netns"
  ip -n trt-ctl link set lo up
  ip -n trt-ctl link add br0 type bridge
  ip -n trt-ctl addr add 10.77.0.1/24 dev br0
  ip -n trt-ctl link set br0 up
  for ((i = 1; i <= n; i++)); do
    ip netns add "trt-n$i"
    echo "trt-n$i" >> "$dir/netns"
    ip -n "trt-n$i" link set lo up
    ip -n "trt-n$i" link add eth0 type veth peer name "v$i" netns trt-ctl
    ip -n "trt-n$i" addr add "10.77.0.$((10 + i))/24" dev eth0
    ip -n "trt-n$i" link set eth0 up
    ip -n trt-ctl link set "v$i" master br0
    ip -n trt-ctl link set "v$i" up
    echo "10.77.0.$((10 + i)) trt-n$i # trainrt-local-cluster" >> /etc/hosts
  done
  echo "10.77.0.1 trt-ctl # trainrt-local-cluster" >> /etc/hosts
}

cmd_run() {
  export SLURM_CONF=$conf
  if [[ -f $dir/netns ]]; then exec nsenter --net=/run/netns/trt-ctl "$@"; fi
  exec "$@"
}

xml_node_line() {  # CPU and GPU counts of a topology file, as a slurm.conf node line
  local topo=$1 json cpus gpus numa
  json=$("$build/topology/trainrt-topo" show --xml "$topo" --policy none --tasks 1 --format json) ||
    die "cannot read topology $topo"
  cpus=$(python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["node"]["cores"])' <<<"$json")
  gpus=$(python3 -c 'import json,sys; d=json.load(sys.stdin); print(len(d["gpus"]))' <<<"$json")
  echo "CPUs=$cpus Sockets=1 CoresPerSocket=$cpus ThreadsPerCore=1 RealMemory=4096 Gres=gpu:$gpus"
  echo "$gpus" > "$dir/gpu-count"
}

cmd_start() {
  local mode=xml topo="" plugin="" plugin_args="" nodes=1 task_plugin=none system_plugstack=0
  while (($#)); do
    case $1 in
      --task-plugin) task_plugin=$2; shift 2 ;;
      --system-plugstack) system_plugstack=1; shift ;;
      --build) build=$2; shift 2 ;;
      --mode) mode=$2; shift 2 ;;
      --xml) topo=$2; shift 2 ;;
      --plugin) plugin=$2; shift 2 ;;
      --plugin-args) plugin_args=$2; shift 2 ;;
      --nodes) nodes=$2; shift 2 ;;
      *) die "unknown argument '$1' (see the header of $0)" ;;
    esac
  done
  [[ $mode == live || $mode == xml ]] || die "unknown mode '$mode'; valid: live, xml"
  [[ $nodes =~ ^[1-9][0-9]?$ ]] || die "--nodes '$nodes' is not a number from 1 to 99"
  [[ $nodes == 1 || $mode == live ]] || die "--nodes $nodes needs --mode live"
  [[ $task_plugin == none || ($task_plugin == affinity && $mode == live) ]] ||
    die "--task-plugin '$task_plugin': valid are none, and affinity with --mode live"
  plugin=${plugin:-$build/spank_plugin/train_runtime.so}
  [[ $system_plugstack == 1 || -f $plugin ]] ||
    die "plugin $plugin not found; build first (bash scripts/build.sh) or name the build with --build DIR"
  [[ $system_plugstack == 0 || -f /etc/slurm/plugstack.conf ]] || die "--system-plugstack: /etc/slurm/plugstack.conf is missing"
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
  local ctl_host="$(hostname)(127.0.0.1)" node_names node_addrs
  if ((nodes > 1)); then
    make_namespaces "$nodes"
    ctl_host="$(hostname)(10.77.0.1)"  # slurmctld insists on its own hostname
    node="trt-n[1-$nodes]"
    node_addrs="10.77.0.[11-$((10 + nodes))]"
  else
    node_addrs=127.0.0.1
  fi
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
  if ((system_plugstack)); then
    [[ -z $plugin_args && $mode == live ]] || die "--system-plugstack takes the installed arguments (live mode, no --plugin-args)"
    echo "include /etc/slurm/plugstack.conf" > "$dir/plugstack.conf"
  else
    # A private copy, replaced by rename: srun and slurmstepd reload the .so for every step.
    cp "$plugin" "$dir/train_runtime.so.new" && mv "$dir/train_runtime.so.new" "$dir/train_runtime.so"
    echo "required $dir/train_runtime.so $plugin_args" > "$dir/plugstack.conf"
  fi

  cat > "$conf" <<CONF
ClusterName=trainrt
SlurmctldHost=$ctl_host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket.2
ProctrackType=proctrack/linuxproc
TaskPlugin=task/$task_plugin
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
NodeName=$node NodeAddr=$node_addrs $node_line State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
  local n; n=$(cat "$dir/gpu-count")
  {
    echo "AutoDetect=off"
    ((n > 0)) && echo "NodeName=$node Name=gpu File=$dir/dev/fakegpu[0-$((n - 1))]"
  } > "$dir/gres.conf"

  export SLURM_CONF=$conf
  if ((nodes > 1)); then
    # nsenter, not `ip netns exec`: the latter remounts /sys, which slurmd does not survive.
    nsenter --net=/run/netns/trt-ctl slurmctld -f "$conf"
    for ((i = 1; i <= nodes; i++)); do
      mkdir -p "$dir/spool-trt-n$i" "$dir/tmp-trt-n$i"
      nsenter --net="/run/netns/trt-n$i" slurmd -f "$conf" -N "trt-n$i"
    done
  else
    mkdir -p "$dir/spool-$node" "$dir/tmp-$node"
    slurmctld -f "$conf"
    slurmd -f "$conf"
  fi
  local up=0
  for _ in $(seq 1 150); do
    up=$(bash "$0" run sinfo -h -N -o '%T' 2>/dev/null | grep -cE '^(idle|mixed|allocated)' || true)
    ((up >= nodes)) && break
    sleep 0.1
  done
  ((up >= nodes)) || { tail -20 "$dir"/slurmd-*.log "$dir/slurmctld.log" >&2; die "only $up of $nodes nodes came up"; }
  log "up: mode=$mode, $nodes node(s) $node: $node_line"
  log "clients need: export SLURM_CONF=$conf"
}

case ${1:-} in
  start) shift; cmd_start "$@" ;;
  stop) cmd_stop ;;
  env) echo "export SLURM_CONF=$conf" ;;
  run) shift; cmd_run "$@" ;;
  *) die "usage: $0 start [--mode live|xml] [--xml FILE] [--nodes N] [--build DIR] [--plugin SO] [--plugin-args ARGS] [--task-plugin none|affinity] [--system-plugstack] | stop | env | run CMD..." ;;
esac
