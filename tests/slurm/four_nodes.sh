#!/usr/bin/env bash
# Multi-node start-up on a real 4-node local Slurm cluster (issue 30): 8 ranks, 2 per node, each
# node a slurmd in its own network namespace. trainrt::init() must build the hierarchical host
# backend across the 4 nodes and pass every collective; a checkpoint written by all 8 ranks must
# be committed (one manifest naming 8 shards, trainrt-ckpt verify), and a second job must restore
# exactly that step on every rank. Its own namespace prefix and subnet, so it runs beside other
# engineers' clusters. Usage: four_nodes.sh BUILD_DIR. Exit 77 (skipped) when not root.
set -uo pipefail
build=$(cd "$1" && pwd)
repo=$(cd "$(dirname "$0")/../.." && pwd)
cluster=$repo/slurm_examples/local-cluster/cluster.sh
coll=$build/tests/runtime/collectives_mp
ckpt=$build/tests/checkpoint/ckpt_mp
ckpt_tool=$build/checkpoint/trainrt-ckpt
if [[ $(id -u) -ne 0 ]]; then echo "SKIPPED: the local Slurm cluster needs root"; exit 77; fi
for f in "$coll" "$ckpt" "$ckpt_tool" "$build/tests/bootstrap/session_mp"; do [[ -x $f ]] || { echo "FAIL: $f is not built"; exit 1; }; done

source "$repo/tests/slurm/harness.sh"
cluster_harness fournodes 8027 8028
export TRAINRT_CLUSTER_PREFIX=t4n TRAINRT_CLUSTER_SUBNET=10.78.4
bash "$cluster" start --mode live --nodes 4 >/dev/null 2>"$work/start.log" || { cat "$work/start.log"; exit 1; }
crun() { timeout 180 bash "$cluster" run "$@"; }

# ---------------------------------------------------------------- start-up + host backend
# bind=off: the 4 "nodes" share this machine's cores (slurm_integration.sh says why it matters).
out=$(crun srun -N 4 -n 8 --ntasks-per-node=2 --mpi=pmix --kill-on-bad-exit=1 --train-runtime=policy=numa,bind=off \
  bash -c 'echo "NODE $SLURM_PROCID $SLURMD_NODENAME"; exec "$0" init' "$coll" 2>&1); rc=$?
nodes=$(grep '^NODE ' <<<"$out" | sort -k2n | awk '{printf "%s%s", sep, $3; sep=","}')
want_nodes=t4n-n1,t4n-n1,t4n-n2,t4n-n2,t4n-n3,t4n-n3,t4n-n4,t4n-n4
ranks_ok=1
for r in 0 1 2 3 4 5 6 7; do
  grep -qE "^rank $r of 8 \(rank $r/8 \(local $((r % 2))/2\), host backend shm\+gloo.*\): [1-9][0-9]* passed, 0 failed$" <<<"$out" ||
    ranks_ok=0
done
if [[ $rc -eq 0 && $nodes == "$want_nodes" && $ranks_ok == 1 ]]; then
  pass "4 nodes x 2 ranks: ranks in node blocks, trainrt::init() builds shm+gloo across the nodes, every collective verified"
else fail "4-node start-up and host backend (srun rc=$rc, nodes $nodes)" "$(grep -v '^NODE' <<<"$out" | tail -12)"; fi

# ---------------------------------------------------------------- the bootstrap's collectives and node map
# The same with the leaders' addresses in one PMIx fence instead of over TCP (what a site whose
# node names do not resolve uses), and a value the runtime does not know.
out=$(TRAINRT_LEADER_EXCHANGE=pmix crun srun -N 4 -n 8 --ntasks-per-node=2 --mpi=pmix --kill-on-bad-exit=1 \
  --train-runtime=policy=numa,bind=off "$coll" init 2>&1); rc=$?
passed=$(grep -cE "^rank [0-7] of 8 \(.*host backend shm\+gloo.*\): [1-9][0-9]* passed, 0 failed$" <<<"$out")
bad=$(TRAINRT_LEADER_EXCHANGE=fence crun srun -N 4 -n 8 --ntasks-per-node=2 --mpi=pmix --kill-on-bad-exit=1 "$coll" init 2>&1); brc=$?
# The default takes the TCP path: only it reads the port range, so a bad one fails init there.
ports=$(TRAINRT_RENDEZVOUS_PORTS=1-2 crun srun -N 4 -n 8 --ntasks-per-node=2 --mpi=pmix --kill-on-bad-exit=1 "$coll" init 2>&1); prc=$?
if [[ $rc -eq 0 && $passed -eq 8 && $brc -ne 0 && $prc -ne 0 ]] &&
   grep -q "TRAINRT_LEADER_EXCHANGE='fence': use tcp (the default) or pmix" <<<"$bad" &&
   grep -q "TRAINRT_RENDEZVOUS_PORTS='1-2' is not FIRST-LAST" <<<"$ports"; then
  pass "TRAINRT_LEADER_EXCHANGE=pmix: the leaders meet in one PMIx fence, every collective verified; 'fence' is refused, naming it; the default (tcp) reads TRAINRT_RENDEZVOUS_PORTS and refuses '1-2'"
else fail "TRAINRT_LEADER_EXCHANGE (pmix: srun rc=$rc, $passed of 8 ranks passed; 'fence': rc=$brc; ports '1-2': rc=$prc)" \
  "$(tail -6 <<<"$out")" "$(tail -3 <<<"$bad")" "$(tail -3 <<<"$ports")"; fi

out=$(crun srun -N 4 -n 8 --ntasks-per-node=2 --mpi=pmix --kill-on-bad-exit=1 "$build/tests/bootstrap/session_mp" 2>&1); rc=$?
if [[ $rc -eq 0 && $(grep -c ' 0 failed, nodes \[0,1|2,3|4,5|6,7\]$' <<<"$out") -eq 8 ]]; then
  pass "across 4 nodes: allgather, gather to every root, gather_from, broadcast, a barrier that holds every node until a late rank arrives (Slurm default TreeWidth 50 > 4 nodes); every rank sees nodes [0,1|2,3|4,5|6,7]"
else fail "4-node bootstrap collectives (srun rc=$rc)" "$(tail -8 <<<"$out")"; fi
# 20 ranks (overcommitted: a node has 2 cores): past 16 an allgather is a gather through the node
# leaders plus one broadcast.
out=$(crun srun -N 4 -n 20 --overcommit --distribution=block --mpi=pmix --kill-on-bad-exit=1 "$build/tests/bootstrap/session_mp" 2>&1); rc=$?
if [[ $rc -eq 0 && $(grep -c ' 0 failed, nodes \[0,1,2,3,4|5,6,7,8,9|10,11,12,13,14|15,16,17,18,19\]$' <<<"$out") -eq 20 ]]; then
  pass "across 4 nodes at 20 ranks: the same collectives through the node leaders"
else fail "4-node bootstrap collectives at 20 ranks (srun rc=$rc)" "$(tail -8 <<<"$out")"; fi

# ---------------------------------------------------------------- a checkpoint committed by 8 ranks
d=$work/ckpt
out=$(crun srun -N 4 -n 8 --ntasks-per-node=2 --mpi=pmix --kill-on-bad-exit=1 "$ckpt" cycle "$d" 2 2>&1); rc=$?
verify=$("$ckpt_tool" verify "$d" 2>&1); vrc=$?
if [[ $rc -eq 0 && $(grep -c ': SAVED 1 ' <<<"$out") -eq 8 && $vrc -eq 0 ]] &&
   python3 - "$("$ckpt_tool" list "$d" --json 2>&1)" <<'PY'; then
import json, sys
newest = max(json.loads(sys.argv[1])["steps"], key=lambda s: s["step"])
ranks = sorted(s["rank"] for s in newest["shards"])
print(f"newest step {newest['step']} {newest['state']}, world {newest['world_size']}, shard ranks {ranks}")
sys.exit(0 if (newest["step"], newest["state"], newest["world_size"], ranks) == (1, "committed", 8, list(range(8))) else 1)
PY
  pass "8 ranks on 4 nodes commit steps 0 and 1: step 1's manifest names 8 shards, trainrt-ckpt verify passes"
else fail "4-node checkpoint commit (srun rc=$rc, verify rc=$vrc)" "$(tail -8 <<<"$out")" "$verify"; fi

out=$(crun srun -N 4 -n 8 --ntasks-per-node=2 --mpi=pmix --kill-on-bad-exit=1 "$ckpt" cycle "$d" 1 2>&1); rc=$?
if [[ $rc -eq 0 && $(grep -c ': RESTORED 1$' <<<"$out") -eq 8 && $(grep -c ': SAVED 2 ' <<<"$out") -eq 8 ]]; then
  pass "a new 4-node job restores step 1 on all 8 ranks (content checked per rank) and commits step 2"
else fail "4-node restore (srun rc=$rc)" "$(tail -8 <<<"$out")"; fi

echo "four nodes: $passed passed, $failed failed"
exit $((failed > 0))
