#!/usr/bin/env bash
# trainrt-topo rail-signature | rail-check: two real JUWELS Booster nodes whose HDR NICs are
# named in a different order (jwb0001: GPU0>mlx5_1, jwb0004: GPU0>mlx5_0) are told apart; the
# same node three times agrees. Skipped (77) without ../shared/topologies.
set -u
topo=$1
dir=${2:-}
a=$dir/hwloc-jsc-juwels-booster-jwb0001-4xA100-4xHDR.xml
b=$dir/hwloc-jsc-juwels-booster-jwb0004-4xA100-4xHDR.xml
if [[ ! -f $a || ! -f $b ]]; then echo "SKIPPED: $dir lacks the JUWELS Booster files"; exit 77; fi
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
sig() { "$topo" rail-signature --xml "$1"; }

out=$( { sig "$a"; sig "$a"; sig "$a"; } | "$topo" rail-check -); rc=$?
[[ $rc -eq 0 && $out == *"1 layout(s)"* ]] && echo "ok: identical nodes agree" || fail "identical: rc=$rc $out"

out=$( { sig "$a" | sed 's/^/0: /'; sig "$b" | sed 's/^/1: /'; sig "$a" | sed 's/^/2: /'; } | "$topo" rail-check -); rc=$?
[[ $rc -eq 1 && $out == *"DIFFERS  1 node(s): jwb0004.juwels"* ]] && echo "ok: jwb0004 named" || fail "mismatch: rc=$rc $out"

err=$(echo "n1 rails/1:0123456789abcdef gpus=0 rails=0" | "$topo" rail-check - 2>&1 >/dev/null); rc=$?
[[ $rc -eq 2 && $err == *"does not match"* ]] && echo "ok: forged line refused" || fail "forged: rc=$rc $err"
echo "cli_rail_check: $fails failure(s)"
exit $((fails > 0))
