#!/usr/bin/env bash
# Every bad input to trainrt-topo: exit code 2 and one line on stderr that names the input.
# (The checks on real servers' files are cli_real_topologies.sh, Skipped without the folder.)
set -u
topo=$1
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
"$topo" --help | grep -q -- '--policy' || { echo "FAIL: --help lacks --policy"; fails=$((fails + 1)); }
"$topo" --policy numa --tasks 2 >/dev/null || { echo "FAIL: live numa placement"; fails=$((fails + 1)); }
echo "cli_errors: $fails failure(s)"
exit $((fails > 0))
