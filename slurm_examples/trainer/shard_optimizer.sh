#!/usr/bin/env bash
# train-mlp --shard-optimizer under mpirun (3 ranks, the cpu engine):
#  1. ZeRO-1 gives the replicated engine's bits: the same final parameters after 60 steps;
#  2. a rank killed at step 35, the rerun resumes and ends bitwise equal;
#  3. saved by 3 ranks at step 40, a rerun on 2 ranks restores the sharded moments (resharded)
#     and trains on to step 60, whose checkpoint (saved by 2) verifies.
# Usage: shard_optimizer.sh MPIRUN TRAIN_MLP TRAINRT_CKPT
set -uo pipefail
mpirun=$1 trainer=$2 tool=$3
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
fail=0
run() { local n=$1; shift; "$mpirun" --allow-run-as-root --oversubscribe -np "$n" "$trainer" --device cpu --ckpt-every 10 "$@" 2>&1; }
final() { sed -nE 's/^FINAL step ([0-9]+) .* params ([0-9a-f]+)$/\1 \2/p' <<<"$1"; }
pass() { echo "PASS $*"; }
bad() { echo "FAIL $1"; shift; printf '%s\n' "$@" | tail -15; fail=1; }

sharded=$(run 3 --shard-optimizer --steps 60 --ckpt-dir "$d/a" --out "$d/ao")
plain=$(run 3 --steps 60 --ckpt-dir "$d/b" --out "$d/bo")
if [[ -n $(final "$sharded") && $(final "$sharded") == "$(final "$plain")" ]]; then
  pass "sharded optimizer == replicated at 3 ranks: $(final "$sharded")"
else bad "sharded vs replicated: '$(final "$sharded")' vs '$(final "$plain")'" "$sharded"; fi

run 3 --shard-optimizer --steps 60 --ckpt-dir "$d/c" --out "$d/co" --fault kill:1:35 >/dev/null
resumed=$(run 3 --shard-optimizer --steps 60 --ckpt-dir "$d/c" --out "$d/co")
if grep -q "starting after step [1-9]" <<<"$resumed" && [[ $(final "$resumed") == "$(final "$sharded")" ]]; then
  pass "killed at step 35 and resumed: $(grep -o 'starting after step [0-9]*' <<<"$resumed"), final parameters equal"
else bad "kill and resume: '$(final "$resumed")' vs '$(final "$sharded")'" "$resumed"; fi

run 3 --shard-optimizer --steps 40 --ckpt-dir "$d/s" --out "$d/so" >/dev/null
shrunk=$(run 2 --shard-optimizer --steps 60 --ckpt-dir "$d/s" --out "$d/so2")
if grep -q "resharded 2 tensors" <<<"$shrunk" && grep -q "2 ranks, .* starting after step 40 " <<<"$shrunk" &&
   [[ $(final "$shrunk" | cut -d' ' -f1) == 60 ]]; then
  pass "saved by 3 ranks, the rerun on 2 restored step 40 (the moments resharded) and trained to step 60"
else bad "shrink 3 -> 2" "$shrunk"; fi
"$tool" verify "$d/s" >/dev/null 2>&1 && pass "step 60, saved by 2 ranks, verifies (its moments' fingerprint included)" ||
  bad "step 60 of the 2-rank rerun does not verify" "$("$tool" verify "$d/s" 2>&1)"
exit $fail
