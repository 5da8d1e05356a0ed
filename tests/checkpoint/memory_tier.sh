#!/usr/bin/env bash
# The memory tier across nodes, simulated under mpirun (each rank is given its node's name; a lost
# node is its tier directory removed, a spare is a new name with an empty tier): buddy copies at
# every save, a restart on the same nodes from each node's own copies, a lost node replaced by a
# spare that gets its ranks' shards from their buddy copies, a copy that fails its checksum
# replaced by the buddy's, a corrupted buddy copy of a lost node falling back to the directory
# (named), both nodes of a buddy pair lost, a shrink from memory with sharded state, memory per
# node, and the job's cleanup. Every restore checks every byte.
# Usage: memory_tier.sh MPIRUN TIER_MP
set -uo pipefail
mpirun=$1 prog=$2
d=$(mktemp -d)
base=$(mktemp -d /dev/shm/trainrt-tier-test.XXXXXX)
trap 'rm -rf "$d" "$base"' EXIT
failures=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $1"; shift; printf '  %s\n' "$@"; failures=$((failures + 1)); }
job=
run() {  # run NP MODE [STEP] --nodes ... [more options]
  local np=$1; shift
  "$mpirun" --allow-run-as-root --oversubscribe -np "$np" "$prog" "$@" --dir "$d/$job" --base "$base" --job "$job" 2>&1
}
node_dir() { echo "$(echo "$base/trainrt-$(id -u)/job-$job"/ckpt-*)/$1"; }  # one checkpoint directory per job here
tier_file() { echo "$(node_dir "$1")/step_$(printf %012d "$2")/rank_$(printf %05d "$3").shard"; }
count() { grep -c "$1" <<<"$2"; }
# Flips one byte inside entry 'w' (4 KiB past the header pages).
flip() {
  python3 - "$1" <<'PY'
import struct, sys
p = sys.argv[1]
with open(p, "r+b") as f:
    head = f.read(16)
    start = (16 + struct.unpack("<I", head[12:16])[0] + 4095) // 4096 * 4096
    f.seek(start + 1000); b = f.read(1); f.seek(start + 1000); f.write(bytes([b[0] ^ 0x20]))
PY
}

# ------------------------------------------------------------- buddy copies, same-node restart
job=a
out=$(run 4 save 5 --nodes n1,n1,n2,n2; run 4 snapshot 10 --nodes n1,n1,n2,n2)
if [[ $(count "^SAVED 10 in_memory=1 buddies=1" "$out") -eq 4 && $(count "^SAVED 5 in_memory=1 buddies=1" "$out") -eq 4 ]] &&
   [[ -z $(ls "$d/a" | grep step_000000000010) ]]; then
  held1=$(ls "$(node_dir n1)/step_000000000010" | tr '\n' ' ') held2=$(ls "$(node_dir n2)/step_000000000010" | tr '\n' ' ')
  if [[ $held1 == "MANIFEST.json rank_00000.shard rank_00001.shard rank_00002.shard rank_00003.shard " &&
        $held2 == "$held1" ]] && [[ ! -e $(node_dir n1)/step_000000000005 ]]; then
    pass "save 5, snapshot 10 at 4 ranks on 2 nodes: each node holds its 2 shards and its buddy node's 2, one step kept"
  else fail "tier contents after snapshot 10" "n1: $held1" "n2: $held2"; fi
else fail "save/snapshot with buddies" "$out"; fi
# Memory per node: the node's own shards and one copy of the other node's, nothing else.
own=$(($(stat -c %s "$(tier_file n1 10 0)") + $(stat -c %s "$(tier_file n1 10 1)")))
all=$(du -sb --apparent-size "$(node_dir n1)" | cut -f1)
ratio=$(python3 -c "print(f'{$all / $own:.3f}')")
if python3 -c "import sys; sys.exit(0 if $all / $own <= 2.1 else 1)"; then
  pass "memory per node: $all bytes for $own bytes of own shards = ${ratio}x (<= 2.1x)"
else fail "memory per node ${ratio}x" "$(ls -laR "$(node_dir n1)")"; fi
out=$(run 4 restore --nodes n1,n1,n2,n2)
if [[ $(count "^RESTORED 10 memory local=1 moved=0" "$out") -eq 4 && $(count "^CONTENT ok" "$out") -eq 4 ]]; then
  pass "restart on the same nodes: step 10 from each node's own copies, every byte as saved"
else fail "same-node restart" "$out"; fi

# ------------------------------------------------------------- a node the job ended on before its manifest
# Snapshot 10 is committed on n1 (its MANIFEST written) when the job ends: n2 holds its own two
# shards but no manifest yet, and no buddy copies were made (n2's of n1's, n1's of n2's are gone).
# Every shard is still on its own node: the restart copies the manifest to n2 and loads from there.
job=nm
out=$(run 4 snapshot 10 --nodes n1,n1,n2,n2)
rm -f "$(node_dir n2)/step_000000000010/MANIFEST.json" "$(tier_file n1 10 2)" "$(tier_file n1 10 3)" \
      "$(tier_file n2 10 0)" "$(tier_file n2 10 1)"
out=$(run 4 restore --nodes n1,n1,n2,n2)
if [[ $(count "^RESTORED 10 memory local=1 moved=0" "$out") -eq 4 && $(count "^CONTENT ok" "$out") -eq 4 ]] &&
   [[ -e $(node_dir n2)/step_000000000010/MANIFEST.json ]]; then
  pass "n2 without the manifest of step 10: its own shards restored after the manifest came from n1, every byte as saved"
else fail "a node without the manifest" "$out"; fi
job=a

# ------------------------------------------------------------- a lost node and a spare
rm -rf "$(node_dir n2)"
out=$(run 4 restore --nodes n1,n1,n3,n3)
if [[ $(count "^RESTORED 10 memory local=1 moved=0" "$out") -eq 2 && $(count "^RESTORED 10 memory local=0 moved=1" "$out") -eq 2 &&
      $(count "^CONTENT ok" "$out") -eq 4 ]] && [[ -e $(tier_file n3 10 2) && -e $(node_dir n3)/step_000000000010/MANIFEST.json ]]; then
  pass "node n2 lost, spare n3: ranks 2 and 3 got their shards from the buddy copies on n1, every byte as saved"
else fail "spare after a lost node" "$out"; fi
# The spare trains on: the next snapshot pairs n1 with n3.
out=$(run 4 snapshot 15 --nodes n1,n1,n3,n3)
rm -rf "$(node_dir n1)"
out2=$(run 4 restore --nodes n4,n4,n3,n3)
if [[ $(count "^SAVED 15 in_memory=1 buddies=1" "$out") -eq 4 && $(count "^RESTORED 15 memory" "$out2") -eq 4 &&
      $(count "^CONTENT ok" "$out2") -eq 4 ]]; then
  pass "after the swap the spare is a buddy too: snapshot 15 on n1+n3, then n1 lost, spare n4 restores 15 from n3"
else fail "second loss after the swap" "$out" "$out2"; fi

# ------------------------------------------------------------- a copy that fails its checksum
job=b
run 4 save 5 --nodes n1,n1,n2,n2 >/dev/null; run 4 snapshot 10 --nodes n1,n1,n2,n2 >/dev/null
flip "$(tier_file n1 10 1)"
out=$(run 4 restore --nodes n1,n1,n2,n2)
if [[ $(count "^RESTORED 10 memory" "$out") -eq 4 && $(count "^CONTENT ok" "$out") -eq 4 ]] &&
   grep -q "^RESTORED 10 memory local=0 moved=1" <<<"$out"; then
  pass "rank 1's own copy flipped: it fails its checksum, the buddy copy from n2 replaces it, step 10 from memory"
else fail "own copy corrupted" "$out"; fi

# ------------------------------------------------------------- a corrupted buddy copy of a lost node
job=c
run 4 save 5 --nodes n1,n1,n2,n2 >/dev/null; run 4 snapshot 10 --nodes n1,n1,n2,n2 >/dev/null
rm -rf "$(node_dir n2)"
flip "$(tier_file n1 10 2)"
out=$(run 4 restore --nodes n1,n1,n3,n3)
if [[ $(count "^RESTORED 5 disk" "$out") -eq 4 && $(count "^CONTENT ok" "$out") -eq 4 ]] &&
   grep -q "^FALLBACK rank 0: memory tier step 10: no verified copy left in memory of rank 2's shard.*rank_00002.shard fails its checksum" <<<"$out"; then
  pass "n2 lost and n1's copy of rank 2 corrupted: step 10 refused with the reason, step 5 from the directory"
  grep -m1 "^FALLBACK rank 0" <<<"$out" | sed 's/^/  | /'
else fail "corrupted buddy copy" "$out"; fi

# ------------------------------------------------------------- both nodes of a pair lost
job=e
run 6 save 5 --nodes n1,n1,n2,n2,n3,n3 >/dev/null; run 6 snapshot 10 --nodes n1,n1,n2,n2,n3,n3 >/dev/null
rm -rf "$(node_dir n1)" "$(node_dir n2)"  # n1's buddy is n2: ranks 0 and 1 exist nowhere else
out=$(run 6 restore --nodes n4,n4,n5,n5,n3,n3)
if [[ $(count "^RESTORED 5 disk" "$out") -eq 6 && $(count "^CONTENT ok" "$out") -eq 6 ]] &&
   grep -q "no verified copy left in memory of rank 0's shard" <<<"$out"; then
  pass "two nodes of one buddy pair lost (3 nodes): no copy of ranks 0-1 in memory, step 5 from the directory"
else fail "two nodes lost" "$out"; fi

# ------------------------------------------------------------- shrink from memory, sharded state
job=f
run 4 snapshot 10 --nodes n1,n1,n2,n2 --state sharded >/dev/null
rm -rf "$(node_dir n2)"
out=$(run 2 restore --nodes n1,n1 --state sharded)
if [[ $(count "^RESTORED 10 memory" "$out") -eq 2 && $(count "^CONTENT ok" "$out") -eq 2 ]]; then
  pass "n2 lost, no spare: 4 -> 2 ranks on n1, sharded and replicated state resharded from memory (buddy copies of 2-3)"
else fail "shrink from memory" "$out"; fi
# That rerun ends before its first capture: the next restores the same step again. Each of its
# ranks holds twice the state of a saved one, so its staging file must not be step 10's own
# rank_0000r.shard grown in place (that copy would fail its checks, and n1 holds the only ones).
out=$(run 2 restore --nodes n1,n1 --state sharded)
if [[ $(count "^RESTORED 10 memory" "$out") -eq 2 && $(count "^CONTENT ok" "$out") -eq 2 ]]; then
  pass "the shrink rerun again: step 10 from memory, its files untouched by the first rerun's staging (2x the state per rank)"
else fail "a second shrink rerun from memory" "$out"; fi

# ------------------------------------------------------------- no buddies: a lost node goes to disk
job=g
run 4 save 5 --nodes n1,n1,n2,n2 --buddies 0 >/dev/null; out=$(run 4 snapshot 10 --nodes n1,n1,n2,n2 --buddies 0)
rm -rf "$(node_dir n2)"
out2=$(run 4 restore --nodes n1,n1,n3,n3)
if [[ $(count "^SAVED 10 in_memory=1 buddies=0" "$out") -eq 4 && $(count "^RESTORED 5 disk" "$out2") -eq 4 ]]; then
  pass "without buddy copies a lost node's shards are not in memory: step 5 from the directory"
else fail "buddies off" "$out" "$out2"; fi

# ------------------------------------------------------------- parity groups instead of buddy copies
# 6 ranks on 3 nodes, one group of 3: rows {0,2,4} and {1,3,5}; each rank keeps half a shard of parity.
parity_file() { echo "$(node_dir "$1")/step_$(printf %012d "$2")/parity_$(printf %05d "$3").xor"; }
parity_steps() {  # job $job: save 5 (the directory's) and snapshot 10, 6 ranks on n1..n3, parity over the 3
  run 6 save 5 --nodes n1,n1,n2,n2,n3,n3 --parity 3 >/dev/null
  run 6 snapshot 10 --nodes n1,n1,n2,n2,n3,n3 --parity 3 >/dev/null
}
job=p
# 1 MiB shards here: the manifest and the 4 KiB parity headers are a fixed cost beside them.
run 6 save 5 --nodes n1,n1,n2,n2,n3,n3 --parity 3 --floats 262144 >/dev/null
out=$(run 6 snapshot 10 --nodes n1,n1,n2,n2,n3,n3 --parity 3 --floats 262144)
held1=$(ls "$(node_dir n1)/step_000000000010" 2>/dev/null | tr '\n' ' ')
own=$(($(stat -c %s "$(tier_file n1 10 0)") + $(stat -c %s "$(tier_file n1 10 1)")))
all=$(du -sb --apparent-size "$(node_dir n1)" | cut -f1)
ratio=$(python3 -c "print(f'{$all / $own:.3f}')")
if [[ $(count "^SAVED 10 in_memory=1 buddies=1" "$out") -eq 6 &&
      $held1 == "MANIFEST.json parity_00000.xor parity_00001.xor rank_00000.shard rank_00001.shard " ]] &&
   python3 -c "import sys; sys.exit(0 if $all / $own <= 1.6 else 1)"; then
  pass "parity, groups of 3 nodes: each node holds its 2 shards and 2 parity blocks; memory per node ${ratio}x its shards (<= 1 + 1/2 + 0.1)"
else fail "parity save" "$out" "n1: $held1" "ratio $ratio"; fi
rm -rf "$(node_dir n2)"
out=$(run 6 restore --nodes n1,n1,n4,n4,n3,n3 --floats 262144)
if [[ $(count "^RESTORED 10 memory" "$out") -eq 6 && $(count "^CONTENT ok" "$out") -eq 6 ]] &&
   grep -q "step 10: 2 shard(s) rebuilt from parity" <<<"$out"; then
  pass "n2 lost, spare n4: ranks 2 and 3 rebuilt from the parities on n1 and n3 and the other shards, every byte as saved"
else fail "parity rebuild on a spare" "$out"; fi
# n2 lost and rank 0's parity (it holds block 1 of rank 2) spoiled by "$@": step 10 must be refused
# with the parity named as REASON says, and step 5 come from the directory.
bad_parity_case() {  # bad_parity_case JOB REASON WHAT COMMAND...
  job=$1; local reason=$2 what=$3; shift 3
  parity_steps
  rm -rf "$(node_dir n2)"
  "$@"
  out=$(run 6 restore --nodes n1,n1,n4,n4,n3,n3)
  if [[ $(count "^RESTORED 5 disk" "$out") -eq 6 && $(count "^CONTENT ok" "$out") -eq 6 ]] &&
     grep -q "^FALLBACK rank 0: memory tier step 10: .*parity_00000.xor $reason" <<<"$out"; then
    pass "n2 lost and rank 0's parity $what: step 10 refused, the parity named, step 5 from the directory"
    grep -m1 "^FALLBACK rank 0" <<<"$out" | cut -c1-240 | sed 's/^/  | /'
  else fail "$what parity" "$out"; fi
}
corrupt_parity() { printf 'garbage' | dd of="$(parity_file n1 10 0)" bs=1 seek=5000 conv=notrunc status=none; }
plant_parity() { cp "$(parity_file n1 10 0)" "$d/planted.xor" && ln -sf "$d/planted.xor" "$(parity_file n1 10 0)"; }
bad_parity_case q "fails its checksum" "corrupted" corrupt_parity
bad_parity_case t "is a symbolic link" "a planted symlink (to good bytes, never followed)" plant_parity
job=r
run 6 snapshot 10 --nodes n1,n1,n2,n2,n3,n3 --parity 3 --state sharded >/dev/null
rm -rf "$(node_dir n3)"
out=$(run 4 restore --nodes n1,n1,n2,n2 --state sharded)
if [[ $(count "^RESTORED 10 memory" "$out") -eq 4 && $(count "^CONTENT ok" "$out") -eq 4 ]] &&
   grep -q "rebuilt from parity" <<<"$out"; then
  pass "n3 lost, no spare: 6 -> 4 ranks on n1 + n2, ranks 4-5 rebuilt from parity, resharded from memory"
else fail "shrink from parity" "$out"; fi
job=s
parity_steps
rm -rf "$(node_dir n1)" "$(node_dir n2)"
out=$(run 6 restore --nodes n4,n4,n5,n5,n3,n3)
if [[ $(count "^RESTORED 5 disk" "$out") -eq 6 && $(count "^CONTENT ok" "$out") -eq 6 ]]; then
  pass "two nodes of one parity group lost: step 5 from the directory"
else fail "two nodes of a group lost" "$out"; fi

echo "memory tier: $failures failure(s)"
exit $((failures > 0))
