#!/usr/bin/env bash
# trainrt-topo on real servers' files (../shared/topologies): bad requests name the input, and the
# JSON hands out only rail NICs. Exit 77 (CTest: Skipped) when the folder is absent.
set -u
topo=$1
shared=$2
if [[ ! -d $shared ]]; then
  echo "SKIPPED: $shared is absent; real-topology CLI checks did not run"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
expect_error() {  # expect_error WORD-IN-MESSAGE ARGS...
  local want=$1; shift
  local err rc
  err=$("$topo" "$@" 2>&1 >/dev/null); rc=$?
  local lines; lines=$(printf '%s\n' "$err" | grep -c .)
  if [[ $rc -ne 2 || $lines -ne 1 || $err != *"$want"* ]]; then
    echo "FAIL: trainrt-topo $* -> rc=$rc, stderr: $err (wanted exit 2, one line containing '$want')"
    fails=$((fails + 1))
  else
    echo "ok: $* -> $err"
  fi
}
turin=$shared/hwloc-lenovo-sd665nv3-turin-4xH200-4xCX7.xml
expect_error "need 8 GPUs" show --xml "$turin" --tasks 8
expect_error "GPU 9 does not exist" show --xml "$turin" --gpus 0,9
expect_error "mlx5_42" show --xml "$turin" --nic-include mlx5_42
# Rank 0 gets mlx5_0; the Ethernet ports mlx5_1 and mlx5_2 are never handed out, neither as a
# rank's NIC nor in any NCCL_IB_HCA.
"$topo" show --xml "$turin" --tasks 4 --format json >"$tmp/turin.json" || { echo "FAIL: turin json"; fails=$((fails + 1)); }
python3 - "$tmp/turin.json" <<'PY' || { echo "FAIL: turin rails (above)"; fails=$((fails + 1)); }
import json, re, sys
d = json.load(open(sys.argv[1]))
ranks = d["ranks"]
assert [n["name"] for n in ranks[0]["nics"]] == ["mlx5_0"], ranks[0]["nics"]
for r in ranks:
    names = [n["name"] for n in r["nics"]] + re.findall(r"mlx5_\d+", r["env"].get("NCCL_IB_HCA", ""))
    assert not {"mlx5_1", "mlx5_2"} & set(names), (r["local_rank"], names)
PY
for f in "$shared"/*.xml; do
  "$topo" show --xml "$f" --format json >/dev/null || { echo "FAIL: $f does not load"; fails=$((fails + 1)); }
done
echo "cli_real_topologies: $fails failure(s)"
exit $((fails > 0))
