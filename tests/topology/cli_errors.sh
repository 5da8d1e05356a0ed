#!/usr/bin/env bash
# Every bad input to trainrt-topo: exit code 2 and one line on stderr that names the input.
set -u
topo=$1
shared=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
printf '<topology version="2.0"><object type="Machine"' > "$tmp/cut.xml"
cat > "$tmp/nogpu.xml" <<'XML'
<system version="1"><cpu numaid="0" affinity="0000000f"></cpu></system>
XML

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

expect_error "missing.xml" --xml "$tmp/missing.xml"
expect_error "missing.xml" --nccl-xml "$tmp/missing.xml"
expect_error "malformed XML" --xml "$tmp/cut.xml"
expect_error "no GPUs" --nccl-xml "$tmp/nogpu.xml"
expect_error "'fastest'" --nccl-xml "$tmp/nogpu.xml" --policy fastest
expect_error "'yaml'" --nccl-xml "$tmp/nogpu.xml" --policy numa --format yaml
expect_error "not on this node" --nccl-xml "$tmp/nogpu.xml" --policy numa --cpus 0-99
expect_error "cpu list" --nccl-xml "$tmp/nogpu.xml" --policy numa --cpus 3-1
expect_error "--tasks" --nccl-xml "$tmp/nogpu.xml" --tasks many
expect_error "--bogus" --bogus
expect_error "excludes" --xml a.xml --nccl-xml b.xml
if [[ -d $shared ]]; then
  turin=$shared/hwloc-lenovo-sd665nv3-turin-4xH200-4xCX7.xml
  expect_error "need 8 GPUs" --xml "$turin" --tasks 8
  expect_error "GPU 9 does not exist" --xml "$turin" --gpus 0,9
  expect_error "mlx5_42" --xml "$turin" --nic-include mlx5_42
  out=$("$topo" --xml "$turin" --tasks 4 --format json) || { echo "FAIL: turin json"; fails=$((fails + 1)); }
  for nic in mlx5_1 mlx5_2; do
    if grep -q "\"NCCL_IB_HCA\": \"=.*$nic" <<<"$out"; then echo "FAIL: $nic handed out"; fails=$((fails + 1)); fi
  done
  grep -q '"NCCL_IB_HCA": "=mlx5_0:1"' <<<"$out" || { echo "FAIL: rank 0 not on mlx5_0"; fails=$((fails + 1)); }
else
  echo "SKIPPED: $shared is absent; real-topology CLI checks did not run"
fi
"$topo" --help | grep -q -- '--policy' || { echo "FAIL: --help lacks --policy"; fails=$((fails + 1)); }
"$topo" --policy numa --tasks 2 >/dev/null || { echo "FAIL: live numa placement"; fails=$((fails + 1)); }
echo "cli_errors: $fails failure(s)"
exit $((fails > 0))
