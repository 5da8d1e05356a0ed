#!/usr/bin/env bash
# The bootstrap at scale on a local cluster of network-namespace nodes (docs/scale.md). For every
# point (ranks, nodes, link delay) of a plan it runs, alternating A B C A B C ...:
#   A  scale_bench floor   bare PMIx: init + data-free fence (cold); fences without and with data
#   B  scale_bench init    trainrt::init() (cold); session barrier/bcast/allgather, NCCL unique ids
#                          from 1 and ceil(N/256) roots, a checkpoint commit (64 B per rank, tmpfs)
#   C  torch               torch's TCPStore + gloo env:// (cold), at points of up to --torch-max
#                          ranks without link delay (the torch of /opt/train-runtime/pyenv where it
#                          imports, else Debian's; --torch-python PY picks one)
#   D  base                with --baseline-lib DIR: B again with DIR's libtrainrt.so (an older
#                          build to compare, figures prefixed base_), up to --baseline-max ranks;
#                          DIR's own scale_bench when it holds one (a library whose ABI changed
#                          needs the program built with it); with --baseline-env VAR=VALUE, B again
#                          with that variable set (e.g. TRAINRT_LEADER_EXCHANGE=pmix: the same
#                          build's earlier path), with or without --baseline-lib
# Every run is one srun bounded by --step-timeout; the load average and the measured node-to-node
# round trip are recorded beside every figure. Output: OUT/raw.tsv (one line per figure and run),
# OUT/summary.txt (medians, ratios to the bare fence measured in the same point).
# Usage: benchmarks/scale.sh [--plan default|quick|model|FILE] [--reps R] [--out DIR] [--build DIR]
#                            [--torch-max N] [--torch-python PY] [--baseline-lib DIR]
#                            [--baseline-max N] [--baseline-env VAR=VALUE] [--step-timeout S] [--budget S]
#                            [--tree-width step|slurm|W] [--data-fence ring|tree]
# --tree-width: Slurm's TreeWidth for each step. step (default): min(16, the step's nodes), so a
#   fence without data crosses every node as a 16-wide tree would; slurm: the cluster's default
#   (50 in Slurm 22.05), under which a step of fewer nodes gets a tree of each node alone and its
#   fence without data synchronises nothing across nodes (docs/scale-measured.md "Slurm's tree"); W: fixed.
# --data-fence tree: fences with data take Slurm's tree too (SLURM_PMIX_FENCE=tree in the steps'
#   environment), not its ring (the default); needs a TreeWidth no larger than the step's nodes.
# A plan FILE holds "ranks nodes delay_us [reps]" lines (reps: default --reps). The default plan is
# what docs/scale.md reports (see the plan below). Run as root after building (ninja scale_bench
# link_delay train_runtime trainrt-topo; the last two for cluster.sh). Memory: ~3 MB per trainrt
# rank, 240-585 MB RSS per torch rank (250 MB each is reserved before a torch point; docs/scale.md).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
build=${TRAINRT_BUILD_DIR:-$repo/build}
plan=default reps=2 out="" torch_max=64 torch_python="" baseline_lib="" baseline_env="" baseline_max=512 step_timeout=300 budget=1500
tree_width=step data_fence=ring
die() { echo "scale: error: $*" >&2; exit 1; }
while (($#)); do
  [[ $1 != --* || $# -ge 2 ]] || die "$1 needs a value (see the header of $0)"
  case $1 in
    --plan) plan=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --torch-max) torch_max=$2; shift 2 ;;
    --torch-python) torch_python=$2; shift 2 ;;
    --baseline-lib) baseline_lib=$(cd "$2" && pwd) || exit 1; shift 2 ;;
    --baseline-max) baseline_max=$2; shift 2 ;;
    --baseline-env) baseline_env=$2; shift 2 ;;
    --step-timeout) step_timeout=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --tree-width) tree_width=$2; shift 2 ;;
    --data-fence) data_fence=$2; shift 2 ;;
    *) die "unknown argument '$1' (see the header of $0)" ;;
  esac
done
# Plain whole numbers: bash reads a leading zero as octal (010 is 8, 08 an error).
whole() { [[ $1 =~ ^(0|[1-9][0-9]{0,8})$ ]]; }
for v in reps torch_max baseline_max step_timeout budget; do
  whole "${!v}" || die "--${v//_/-} '${!v}' is not a whole number"
done
((reps >= 1)) || die "--reps must be at least 1"
[[ $tree_width == step || $tree_width == slurm || ($tree_width =~ ^[0-9]{1,5}$ && $tree_width -ge 2) ]] ||
  die "--tree-width '$tree_width': step, slurm or a whole number of at least 2"
[[ $data_fence == ring || $data_fence == tree ]] || die "--data-fence '$data_fence': ring or tree"
[[ $(id -u) -eq 0 ]] || die "the local cluster needs root"
build=$(cd "$build" && pwd)
bench=$build/benchmarks/scale_bench
[[ -x $bench ]] || die "$bench is not built (ninja scale_bench link_delay in $build)"
[[ -z $baseline_lib || -f $baseline_lib/libtrainrt.so.0 ]] || die "--baseline-lib: no libtrainrt.so.0 in $baseline_lib"
[[ -z $baseline_env || $baseline_env =~ ^[A-Za-z_][A-Za-z0-9_]*=[^,]*$ ]] || die "--baseline-env '$baseline_env': not VAR=VALUE (no comma)"
out=${out:-$repo/build/scale-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out"
out=$(cd "$out" && pwd)

points=()
case $plan in
  quick) points=("64 4 0 1" "64 4 100 1" "256 8 0 1") ;;
  model)
    # Points to fit and check the model on (docs/scale.md "The model"), 3 runs each, no 32 nodes
    # (~7 min here): 256 ranks on 1..16 nodes, 64..1,024 ranks on 8 and 16 nodes, delays 20 and 100 us.
    for n in 1 2 4 8 16; do points+=("256 $n 0 3"); done
    points+=("64 8 0 3" "128 8 0 3" "512 8 0 3" "128 16 0 3" "512 16 0 3" "1024 16 0 3")
    points+=("64 4 100 3" "128 4 100 3" "256 8 100 3" "256 16 100 3" "128 4 20 3" "256 8 20 3" "512 16 20 3") ;;
  default)
    # What docs/scale.md reports (~13 min here): 64..1,024 ranks on 16 nodes, 64 and 2,048 on 32,
    # 256 ranks on 1..8 nodes, 16 and 32 ranks where torch runs too, link delays 20 and 100 us.
    points=("64 16 0 $reps" "256 16 0 $reps" "1024 16 0 1" "64 32 0 $reps" "2048 32 0 1")
    for n in 1 2 4 8; do points+=("256 $n 0 1"); done
    points+=("16 4 0 $reps" "32 8 0 1" "64 4 100 1" "256 16 100 1" "256 8 20 1") ;;
  *)
    [[ -f $plan ]] || die "--plan '$plan': default, quick, model or a file of 'ranks nodes delay_us [reps]' lines"
    while read -r a b c e; do [[ -z $a || $a == \#* ]] || points+=("$a $b ${c:-0} ${e:-$reps}"); done < "$plan" ;;
esac
((${#points[@]})) || die "--plan '$plan' holds no point (lines of 'ranks nodes delay_us [reps]')"
max_nodes=1
for p in "${points[@]}"; do
  read -r r n d k <<<"$p"
  for f in "ranks $r" "nodes $n" "delay_us $d" "reps $k"; do
    whole "${f#* }" || die "plan point '$p': $f is not a whole number (no sign, no leading zero)"
  done
  ((n >= 1 && n <= 64)) || die "plan point '$p': nodes $n, not 1..64"
  ((r >= n && r % n == 0)) || die "plan point '$p': ranks $r is not a multiple of the $n nodes"
  ((k >= 1 && k <= 100)) || die "plan point '$p': reps $k, not 1..100"
  ((d <= 999999)) || die "plan point '$p': delay_us $d, at most 999999 (cluster.sh delay)"
  ((r / n <= 512)) || die "plan point '$p': $((r / n)) ranks per node, Slurm allows 512"
  ((n > max_nodes)) && max_nodes=$n
done
((max_nodes >= 2)) || max_nodes=2  # namespaces (and link delays) exist from 2 nodes on
if printf '%s\n' "${points[@]}" | awk '$3 > 0 {x=1} END {exit !x}' && ! command -v iptables-legacy >/dev/null; then
  die "link delays need iptables (bash scripts/install-deps.sh installs it)"
fi

cluster=$repo/slurm_examples/local-cluster/cluster.sh
export TRAINRT_BUILD_DIR=$build TRAINRT_CLUSTER_DIR=/tmp/trainrt-scale-bench TRAINRT_SLURMCTLD_PORT=8047 \
  TRAINRT_SLURMD_PORT=8048 TRAINRT_CLUSTER_PREFIX=tsc TRAINRT_CLUSTER_SUBNET=10.79.1
export SLURM_CONF=$TRAINRT_CLUSTER_DIR/slurm.conf
trap 'bash "$cluster" stop >/dev/null 2>&1' EXIT
bash "$cluster" start --mode live --nodes "$max_nodes" --cpus 512 >/dev/null 2>"$out/cluster.log" ||
  { cat "$out/cluster.log" >&2; die "the cluster did not start"; }

torch_py="" torch_version=none
if ((torch_max > 0)); then
  for py in $torch_python /opt/train-runtime/pyenv/bin/python /usr/bin/python3; do
    if torch_version=$("$py" -c 'import torch, torch.distributed; print(torch.__version__)' 2>/dev/null); then
      torch_py=$repo/benchmarks/scale_torch.py torch_python=$py; break
    fi
    [[ -z $torch_python || $py != "$torch_python" ]] || die "--torch-python $py cannot import torch.distributed"
    torch_version=none
  done
fi
rtt_py=$repo/benchmarks/scale_rtt.py
load() { cut -d' ' -f1 /proc/loadavg; }
# The previous step's thousand processes may still be exiting: a step starts, and its clock runs,
# only once every node it uses is idle again (and a node drained by a slow exit is resumed).
wait_idle() {  # wait_idle NODELIST
  local i drained
  for ((i = 0; i < 600; i++)); do
    drained=$(bash "$cluster" run sinfo -h -n "$1" -t drained,draining -o '%N' 2>/dev/null)
    [[ -z $drained ]] || bash "$cluster" run scontrol update nodename="$drained" state=resume 2>/dev/null || true
    [[ -z $(bash "$cluster" run sinfo -h -n "$1" -t alloc,mix,comp,drain -o '%N' 2>/dev/null) &&
       -z $(bash "$cluster" run squeue -h 2>/dev/null) ]] && return 0
    sleep 1
  done
  echo "scale: nodes $1 still busy after 600 s" >&2
}
{
  echo "# $(date -Is) $(uname -r) $(nproc) cores $(free -g | awk '/Mem:/ {print $2}') GiB; plan $plan, reps $reps; tree width $tree_width, data fence $data_fence; torch $torch_version ($torch_python); uptime: $(uptime)"
  printf 'point\tranks\tnodes\tdelay_us\trtt_us\trep\tmode\tfigure\tms\tsrun_s\tload_before\tload_after\n'
} > "$out/raw.tsv"
start=$SECONDS delay_now=0 port=29600 width_now=slurm
for p in "${points[@]}"; do
  read -r r n d k <<<"$p"
  if ((SECONDS - start > budget)); then echo "scale: budget of $budget s spent; left out: $p" | tee -a "$out/skipped.txt"; continue; fi
  if ((d != delay_now)); then bash "$cluster" delay "$d" 2>>"$out/cluster.log"; delay_now=$d; fi
  width=$tree_width
  [[ $width != step ]] || { width=$((n < 16 ? n : 16)); ((width >= 2)) || width=$width_now; }
  if [[ $data_fence == tree ]] && ((n > 1)) && [[ $width == slurm || $width -gt $n ]]; then
    die "point '$p': --data-fence tree with TreeWidth ${width/slurm/of the cluster (50)} above $n nodes: Slurm's tree would be each node alone (docs/scale.md)"
  fi
  if [[ $width != slurm && $width != "$width_now" ]]; then
    bash "$cluster" tree-width "$width" 2>>"$out/cluster.log" || die "TreeWidth=$width was not taken (cluster.log)"
    width_now=$width
  fi
  rtt=$(timeout 30 python3 "$rtt_py" tsc-n1 tsc-n2 2>/dev/null || echo NA)
  nodelist="tsc-n[1-$n]"; ((n > 1)) || nodelist=tsc-n1
  modes=(floor init)
  [[ -n $torch_py ]] && ((r <= torch_max && d == 0)) && modes+=(torch)
  [[ -n $baseline_lib || -n $baseline_env ]] && ((r <= baseline_max)) && modes+=(base)
  # torch: 64 ranks of pyenv's torch 2.11 held ~14 GB here (2026-11-27); a step past the memory
  # gets ranks OOM-killed and leaves slurmstepds behind, so such a point is left out up front.
  need_mb=$((r * 4 + 512)); [[ " ${modes[*]} " == *" torch "* ]] && need_mb=$((r * 250 + 512))
  avail_mb=$(awk '/MemAvailable/ {print int($2 / 1024)}' /proc/meminfo)
  if ((avail_mb < need_mb)); then echo "scale: $p needs ~$need_mb MB, $avail_mb MB available: left out" | tee -a "$out/skipped.txt"; continue; fi
  echo "scale: point $r ranks, $n nodes, delay $d us (rtt $rtt us), load $(load)" >&2
  for ((rep = 1; rep <= k; rep++)); do
    for mode in "${modes[@]}"; do
      port=$((port + 1))
      env=(ALL NCCL_SOCKET_IFNAME=eth0 GLOO_SOCKET_IFNAME=eth0 TRAINRT_IFNAME=eth0 MASTER_ADDR=tsc-n1 MASTER_PORT=$port)
      [[ $data_fence == ring ]] || env+=(SLURM_PMIX_FENCE=tree)
      cmd=("$bench" "$mode" --reps 3)
      [[ $mode != torch ]] || cmd=("$torch_python" "$torch_py")
      if [[ $mode == base ]]; then
        cmd=("$bench" init --reps 3)
        [[ -z $baseline_lib ]] || env+=(LD_LIBRARY_PATH="$baseline_lib")
        [[ -z $baseline_lib || ! -x $baseline_lib/scale_bench ]] || cmd[0]=$baseline_lib/scale_bench
        [[ -z $baseline_env ]] || env+=("$baseline_env")
      fi
      wait_idle "$nodelist"
      lb=$(load) t0=$(date +%s.%N)
      res=$(timeout "$step_timeout" bash "$cluster" run srun -N "$n" -n "$r" --ntasks-per-node=$((r / n)) --nodelist="$nodelist" \
        --mpi=pmix --kill-on-bad-exit=1 --export="$(IFS=,; echo "${env[*]}")" "${cmd[@]}" 2>"$out/last-stderr.txt") && rc=0 || rc=$?
      secs=$(echo "$(date +%s.%N) - $t0" | bc)
      if ((rc != 0)); then
        echo "scale: $mode at $p failed (exit $rc, $secs s): $(tail -2 "$out/last-stderr.txt" | tr '\n' ' ')" | tee -a "$out/skipped.txt" >&2
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\tfailed\tNA\t%.2f\t%s\t%s\n' "$r/$n/$d" "$r" "$n" "$d" "$rtt" "$rep" "$mode" "$secs" "$lb" "$(load)" >> "$out/raw.tsv"
        continue
      fi
      la=$(load)
      awk -v p="$r/$n/$d" -v r="$r" -v n="$n" -v d="$d" -v rtt="$rtt" -v rep="$rep" -v mode="$mode" -v s="$secs" -v lb="$lb" -v la="$la" \
        'NF == 4 && $2 == r {printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s%s\t%s\t%.2f\t%s\t%s\n", p, r, n, d, rtt, rep, mode, mode == "base" ? "base_" : "", $1, $4, s, lb, la}' \
        <<<"$res" >> "$out/raw.tsv"
    done
  done
done
bash "$cluster" delay 0 2>/dev/null || true
echo "# done $(date -Is), $((SECONDS - start)) s; uptime: $(uptime)" >> "$out/raw.tsv"
python3 "$repo/benchmarks/scale_model.py" summary "$out/raw.tsv" | tee "$out/summary.txt"
echo "scale: figures in $out (raw.tsv, summary.txt)"
