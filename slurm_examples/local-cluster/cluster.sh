#!/usr/bin/env bash
# A real Slurm cluster on this machine (munge + slurmctld + slurmd from Debian) with the
# train-runtime plugin in its plugstack. Run as root.
#
#   cluster.sh start [--mode live|xml] [--xml FILE] [--nodes N] [--cpus C] [--build DIR] [--plugin SO] [--plugin-args "k=v ..."]
#   cluster.sh stop
#   cluster.sh env        # prints `export SLURM_CONF=...` for clients
#   cluster.sh delay US   # every node's link delays what it sends by US microseconds (0: none)
#   cluster.sh tree-width N  # Slurm's TreeWidth (default 50 in Slurm 22.05), controller and slurmds
#   cluster.sh run CMD... # runs a client command (srun, sbatch, ...) where the controller is
#
# --build DIR: the build folder whose plugin and trainrt-topo the cluster uses (default
#       $TRAINRT_BUILD_DIR, else <repo>/build); --plugin SO names another plugin file.
# --task-plugin affinity: Slurm binds tasks itself (task/affinity, live mode only: with faked CPUs its
#       masks are wrong), as sites do; the plugin then places within Slurm's binding.
# --system-plugstack: use /etc/slurm/plugstack.conf (the installed package's plugstack.conf.d line)
#       instead of the build's plugin.
# --nodes N (2..64, live mode): N nodes on this machine, each slurmd in its own network namespace
#       (<prefix>-n1..N at <subnet>.11+) behind a bridge in the controller's namespace (<prefix>-ctl,
#       <subnet>.1); /etc/hosts gets their names (removed by stop). Clients must run via `cluster.sh run`.
#       Several clusters can run side by side when each has its own TRAINRT_CLUSTER_DIR, ports
#       (TRAINRT_SLURMCTLD_PORT, TRAINRT_SLURMD_PORT), TRAINRT_CLUSTER_PREFIX (default trt) and
#       TRAINRT_CLUSTER_SUBNET (three octets, default 10.77.0). docs/scale.md: memory and limits.
# --cpus C (live mode): every node claims C cores (config_overrides), so a node can take C tasks
#       without srun --overcommit; the tasks still share this machine's real cores. For steps without
#       --train-runtime: the plugin reads the live topology and refuses cores it does not have.
# start mounts the memory tier's tmpfs (/run/trainrt, huge pages) as the Slurm package does at a
#       node's boot, unless it is mounted or TRAINRT_TIER_MOUNT=0.
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
prefix=${TRAINRT_CLUSTER_PREFIX:-trt}
subnet=${TRAINRT_CLUSTER_SUBNET:-10.77.0}
# The default cluster keeps the tag older copies of this script remove, so they still clean up.
hosts_tag="# trainrt-local-cluster"
[[ $prefix == trt ]] || hosts_tag="# trainrt-local-cluster:$prefix"

log() { echo "cluster: $*" >&2; }
die() { echo "cluster: error: $*" >&2; exit 1; }

# Network namespace and interface names are machine-wide and short (15 bytes with "-n64").
[[ $prefix =~ ^[a-z][a-z0-9]{0,7}$ ]] || die "TRAINRT_CLUSTER_PREFIX '$prefix' must be a lowercase letter and up to 7 letters or digits"
[[ $subnet =~ ^([0-9]{1,3})\.([0-9]{1,3})\.([0-9]{1,3})$ ]] &&
  ((BASH_REMATCH[1] <= 255 && BASH_REMATCH[2] <= 255 && BASH_REMATCH[3] <= 255)) ||
  die "TRAINRT_CLUSTER_SUBNET '$subnet' is not three octets such as 10.77.0"

# /etc/hosts is shared by every cluster on the machine: edits go one at a time.
edit_hosts() {  # edit_hosts SED_SCRIPT [LINES_TO_APPEND...]
  local script=$1; shift
  (
    flock 9
    sed -i "$script" /etc/hosts
    (($# == 0)) || printf '%s\n' "$@" >> /etc/hosts
  ) 9>/run/trainrt-local-cluster-hosts.lock
}
drop_hosts() { edit_hosts "/ ${hosts_tag//\//\\/}\$/d"; }

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
  # Every slurmd takes seconds to exit: stop them side by side, not one after another.
  local pids=() f
  for f in "$dir"/slurmd-*.pid; do [[ -f $f ]] && { stop_pidfile "$f" slurmd & pids+=($!); }; done
  ((${#pids[@]} == 0)) || wait "${pids[@]}"
  stop_pidfile "$dir/link_delay.pid" link_delay
  stop_pidfile "$dir/slurmctld.pid" slurmctld
  stop_pidfile "$dir/munge/munged.pid" munged
  if [[ -f $dir/netns ]]; then
    for ns in $(cat "$dir/netns"); do ip netns del "$ns" 2>/dev/null || true; done
    drop_hosts
    rm -f "$dir/netns"
    log "removed network namespaces"
  fi
}

# This kernel has no sch_netem (`tc qdisc ... netem` fails with "unknown qdisc") and no nft queue
# expression: an iptables (legacy) rule in every node hands what it sends on eth0 to NFQUEUE, and
# link_delay releases each packet US microseconds later. One-way delay US between nodes (and to the
# controller), 2 x US for a round trip; traffic inside a node is not delayed.
delay_rule() {  # delay_rule -A|-D NS
  nsenter --net="/run/netns/$2" iptables-legacy -w "$1" OUTPUT -o eth0 -j NFQUEUE --queue-num 0 --queue-bypass
}
cmd_delay() {  # cmd_delay US
  local us=${1:-} ns nss=()
  [[ $us =~ ^[0-9]{1,6}$ ]] || die "delay: '$us' is not a whole number of microseconds (0..999999)"
  [[ -f $dir/netns ]] || die "delay: no multi-node cluster runs in $dir"
  for ns in $(grep -E -- '-n[0-9]+$' "$dir/netns"); do
    while delay_rule -D "$ns" 2>/dev/null; do :; done
    nss+=("$ns")
  done
  stop_pidfile "$dir/link_delay.pid" link_delay
  ((us > 0)) || { log "links undelayed"; return 0; }
  local tool=$build/benchmarks/link_delay
  [[ -x $tool ]] || die "delay: $tool is not built (ninja link_delay in $build)"
  command -v iptables-legacy >/dev/null || die "delay: iptables-legacy is missing (apt-get install iptables)"
  setsid "$tool" "$us" "${nss[@]/#//run/netns/}" </dev/null >/dev/null 2>>"$dir/link_delay.log" &
  echo $! > "$dir/link_delay.pid"
  sleep 0.2
  kill -0 "$(cat "$dir/link_delay.pid")" 2>/dev/null || die "delay: link_delay did not start: $(tail -1 "$dir/link_delay.log")"
  for ns in "${nss[@]}"; do delay_rule -A "$ns" || die "delay: iptables could not add the queue rule in $ns"; done
  log "every node delays what it sends on eth0 by $us us (link_delay pid $(cat "$dir/link_delay.pid"))"
}

# Slurm's PMIx plugin carries a fence without data on its tree of TreeWidth, and since Slurm 20.11
# that tree is each node alone when a step has fewer nodes than TreeWidth (reverse_tree_info's
# shortcut): such a fence synchronises nothing across nodes (docs/scale-measured.md "Slurm's tree").
# benchmarks/scale.sh sets min(16, the step's nodes) before each step, so its bare fence crosses
# every node the way a 16-wide tree would.
cmd_tree_width() {  # cmd_tree_width N
  local w=${1:-} i
  [[ $w =~ ^[0-9]{1,5}$ ]] && ((w >= 2)) || die "tree-width: '$w' is not a whole number of at least 2"
  [[ -f $conf ]] || die "tree-width: no cluster in $dir"
  if grep -q '^TreeWidth=' "$conf"; then sed -i "s/^TreeWidth=.*/TreeWidth=$w/" "$conf"; else echo "TreeWidth=$w" >> "$conf"; fi
  (cmd_run scontrol reconfigure) >/dev/null || die "tree-width: scontrol reconfigure failed"
  for ((i = 0; i < 50; i++)); do
    # The slurmds read the file on the controller's word: a moment for them too.
    [[ $( (cmd_run scontrol show config) 2>/dev/null | sed -n 's/^TreeWidth *= *//p') == "$w" ]] && { sleep 1; log "TreeWidth=$w"; return 0; }
    sleep 0.2
  done
  die "tree-width: the controller does not report TreeWidth=$w after 10 s"
}

# One bridge in the controller's namespace, one veth per node namespace.
make_namespaces() {  # make_namespaces N
  local n=$1 i ns
  # A crashed run of this cluster may have left its namespaces behind: clear them, unless some
  # process still lives in one (then it belongs to a running cluster, maybe someone else's).
  for ns in $(ip netns list | awk -v p="$prefix" '$1 ~ "^" p "-(ctl|n[0-9]+)$" {print $1}'); do
    [[ -z $(ip netns pids "$ns" 2>/dev/null) ]] ||
      die "network namespace $ns is in use (pids $(ip netns pids "$ns" | tr '\n' ' ')); another cluster runs with TRAINRT_CLUSTER_PREFIX=$prefix: choose another prefix"
    ip netns del "$ns"
  done
  drop_hosts
  raise_neighbour_limits "$n"
  local ctl=$prefix-ctl hosts=()
  ip netns add "$ctl"
  echo "$ctl" > "$dir/netns"
  ip -n "$ctl" link set lo up
  ip -n "$ctl" link add br0 type bridge
  ip -n "$ctl" addr add "$subnet.1/24" dev br0
  ip -n "$ctl" link set br0 up
  for ((i = 1; i <= n; i++)); do
    ns=$prefix-n$i
    ip netns add "$ns"
    echo "$ns" >> "$dir/netns"
    ip -n "$ns" link set lo up
    ip -n "$ns" link add eth0 type veth peer name "v$i" netns "$ctl"
    ip -n "$ns" addr add "$subnet.$((10 + i))/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ctl" link set "v$i" master br0
    ip -n "$ctl" link set "v$i" up
    hosts+=("$subnet.$((10 + i)) $ns $hosts_tag")
  done
  hosts+=("$subnet.1 $ctl $hosts_tag")
  edit_hosts "" "${hosts[@]}"
}

# The kernel's ARP table is one for all network namespaces, capped by gc_thresh3 (1,024 by
# default): n nodes that all talk to each other hold ~(n + 1)^2 entries, so from ~30 nodes new
# neighbours were refused ("neighbor table overflow" in dmesg), SYNs went unsent and connections
# stalled for 1, 3, 7 ... s of retries (docs/scale.md). Raised to room for two such clusters and the
# host; never lowered (a higher cap only stops the drops), so it outlives stop.
# The memory tier's huge-page tmpfs, as the Slurm package's boot unit mounts it on a real node
# (spank_plugin/run-trainrt.mount.in, same options): jobs put their tiers there when it is mounted,
# in /dev/shm otherwise (checkpoint::default_tier_base). Left mounted at stop, as on a node;
# TRAINRT_TIER_MOUNT=0 leaves it out (the tiers then use /dev/shm).
mount_memory_tier() {
  local tier=/run/trainrt
  [[ ${TRAINRT_TIER_MOUNT:-1} == 1 ]] && ! mountpoint -q "$tier" || return 0
  mkdir -p "$tier"
  if ! mount -t tmpfs -o mode=1777,nosuid,nodev,huge=within_size,size=50% tmpfs "$tier"; then
    rmdir "$tier" 2>/dev/null || true  # a bare folder is no tier base either (not a mount of its own)
    log "could not mount the tier tmpfs $tier: memory tiers use /dev/shm"
  fi
}

raise_neighbour_limits() {
  local n=$1 need key
  need=$((2 * (n + 1) * (n + 1) + 1024))
  for key in gc_thresh2 gc_thresh3; do
    local file=/proc/sys/net/ipv4/neigh/default/$key
    [[ -w $file ]] || continue
    if (($(cat "$file") < need)); then
      log "net.ipv4.neigh.default.$key $(cat "$file") -> $need (ARP entries for $n nodes talking to each other)"
      echo "$need" > "$file"
    fi
    need=$((need * 2))
  done
}

cmd_run() {
  export SLURM_CONF=$conf
  if [[ -f $dir/netns ]]; then exec nsenter --net="/run/netns/$prefix-ctl" "$@"; fi
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
  local mode=xml topo="" plugin="" plugin_args="" nodes=1 task_plugin=none system_plugstack=0 cpus=""
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
      --cpus) cpus=$2; shift 2 ;;
      *) die "unknown argument '$1' (see the header of $0)" ;;
    esac
  done
  [[ $mode == live || $mode == xml ]] || die "unknown mode '$mode'; valid: live, xml"
  # 64: one /24 holds them, and every node is a slurmd of ~10 MB with its own stepd per step.
  [[ $nodes =~ ^[1-9][0-9]?$ ]] && ((nodes <= 64)) || die "--nodes '$nodes' is not a number from 1 to 64"
  [[ $nodes == 1 || $mode == live ]] || die "--nodes $nodes needs --mode live"
  [[ -z $cpus || ($cpus =~ ^[1-9][0-9]{0,3}$ && $mode == live) ]] ||
    die "--cpus '$cpus': a number of cores from 1 to 9999, with --mode live"
  [[ $task_plugin == none || ($task_plugin == affinity && $mode == live) ]] ||
    die "--task-plugin '$task_plugin': valid are none, and affinity with --mode live"
  plugin=${plugin:-$build/spank_plugin/train_runtime.so}
  [[ $system_plugstack == 1 || -f $plugin ]] ||
    die "plugin $plugin not found; build first (bash scripts/build.sh) or name the build with --build DIR"
  [[ $system_plugstack == 0 || -f /etc/slurm/plugstack.conf ]] || die "--system-plugstack: /etc/slurm/plugstack.conf is missing"
  install_packages
  cmd_stop
  mount_memory_tier
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
    ctl_host="$(hostname)($subnet.1)"  # slurmctld insists on its own hostname
    node="$prefix-n[1-$nodes]"
    node_addrs="$subnet.[11-$((10 + nodes))]"
  else
    node_addrs=127.0.0.1
  fi
  if [[ $mode == live ]]; then
    node_line=$(slurmd -C | head -1 | sed -E 's/^NodeName=[^ ]+ //; s/ UpTime.*//')
    [[ -z $cpus ]] || node_line=$(sed -E "s/CPUs=[0-9]+/CPUs=$cpus/; s/Boards=[0-9]+ //; s/SocketsPerBoard=[0-9]+/Sockets=1/; s/Sockets=[0-9]+/Sockets=1/; s/CoresPerSocket=[0-9]+/CoresPerSocket=$cpus/; s/ThreadsPerCore=[0-9]+/ThreadsPerCore=1/" <<<"$node_line")
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
# A thousand tasks exiting at once on two cores can take minutes: no drained node for it.
UnkillableStepTimeout=300
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
    nsenter --net="/run/netns/$prefix-ctl" slurmctld -f "$conf"
    for ((i = 1; i <= nodes; i++)); do
      mkdir -p "$dir/spool-$prefix-n$i" "$dir/tmp-$prefix-n$i"
      nsenter --net="/run/netns/$prefix-n$i" slurmd -f "$conf" -N "$prefix-n$i"
    done
  else
    mkdir -p "$dir/spool-$node" "$dir/tmp-$node"
    slurmctld -f "$conf"
    slurmd -f "$conf"
  fi
  local up=0
  for _ in $(seq 1 $((150 + 20 * nodes))); do
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
  delay) shift; cmd_delay "$@" ;;
  tree-width) shift; cmd_tree_width "$@" ;;
  *) die "usage: $0 start [--mode live|xml] [--xml FILE] [--nodes N] [--cpus C] [--build DIR] [--plugin SO] [--plugin-args ARGS] [--task-plugin none|affinity] [--system-plugstack] | stop | env | delay US | tree-width N | run CMD..." ;;
esac
