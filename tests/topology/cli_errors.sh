#!/usr/bin/env bash
# Every bad input to trainrt-topo: exit code 2 and one line on stderr that names the input; the old
# flag forms give what their subcommands give.
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

expect_error "missing.xml" show --xml "$tmp/missing.xml"
expect_error "missing.xml" show --nccl-xml "$tmp/missing.xml"
expect_error "malformed XML" show --xml "$tmp/cut.xml"
expect_error "no GPUs" show --nccl-xml "$tmp/nogpu.xml"
expect_error "'fastest'" show --nccl-xml "$tmp/nogpu.xml" --policy fastest
expect_error "'yaml'" show --nccl-xml "$tmp/nogpu.xml" --policy numa --format yaml
expect_error "not on this node" show --nccl-xml "$tmp/nogpu.xml" --policy numa --cpus 0-99
expect_error "cpu list" show --nccl-xml "$tmp/nogpu.xml" --policy numa --cpus 3-1
expect_error "--tasks" show --nccl-xml "$tmp/nogpu.xml" --tasks many
expect_error "--bogus" show --bogus
expect_error "excludes" show --xml a.xml --nccl-xml b.xml
expect_error "frobnicate" frobnicate
expect_error "--policy" rail-signature --nccl-xml "$tmp/nogpu.xml" --policy numa  # show's option, not this one's
expect_error "PATH is required" write-cache
expect_error "FILE is required" rail-check
"$topo" --help | grep -q -- 'rail-signature' || { echo "FAIL: --help lacks the subcommands"; fails=$((fails + 1)); }
"$topo" show --help | grep -q -- '--policy' || { echo "FAIL: show --help lacks --policy"; fails=$((fails + 1)); }
"$topo" show --policy numa --tasks 2 >/dev/null || { echo "FAIL: live numa placement"; fails=$((fails + 1)); }

# The flag forms of before are still understood (boot units and scripts written for them): each
# gives what its subcommand gives, and their errors are the subcommand's.
same() {  # same WHAT "OLD ARGS" "NEW ARGS": identical output and exit status
  local old new rc_old rc_new
  old=$(eval "\"\$topo\" $2" 2>&1); rc_old=$?
  new=$(eval "\"\$topo\" $3" 2>&1); rc_new=$?
  if [[ $rc_old -eq $rc_new && $old == "$new" && -n $new ]]; then echo "ok: old form $2 = $3 (exit $rc_new)"
  else echo "FAIL: old form $2 (exit $rc_old) differs from $3 (exit $rc_new): $old // $new"; fails=$((fails + 1)); fi
}
cat > "$tmp/gpu.xml" <<'XML'
<system version="1"><cpu numaid="0" affinity="0000000f">
  <pci busid="0000:10:00.0" class="0x060400" vendor="0x1000" device="0xc010">
    <pci busid="0000:11:00.0" class="0x030200" vendor="0x10de" device="0x20b0"/>
    <pci busid="0000:12:00.0" class="0x020700" vendor="0x15b3" device="0x101b"/>
  </pci>
</cpu></system>
XML
same "show" "--nccl-xml $tmp/gpu.xml --tasks 1 --format env" "show --nccl-xml $tmp/gpu.xml --tasks 1 --format env"
same "nccl-xml" "--nccl-xml $tmp/gpu.xml --format nccl-xml" "show --nccl-xml $tmp/gpu.xml --format nccl-xml"
same "signature" "--nccl-xml $tmp/gpu.xml --rail-signature" "rail-signature --nccl-xml $tmp/gpu.xml"
"$topo" rail-signature --nccl-xml "$tmp/gpu.xml" > "$tmp/sig"
same "rail-check" "--rail-check $tmp/sig" "rail-check $tmp/sig"
same "rail-check=" "--rail-check=$tmp/sig" "rail-check $tmp/sig"
same "check" "--check --nccl-xml $tmp/gpu.xml" "check --nccl-xml $tmp/gpu.xml"
same "bad policy" "--nccl-xml $tmp/nogpu.xml --policy fastest" "show --nccl-xml $tmp/nogpu.xml --policy fastest"
"$topo" --nccl-xml "$tmp/gpu.xml" --write-cache "$tmp/old/topology.cache" >/dev/null &&
  "$topo" write-cache "$tmp/new/topology.cache" --nccl-xml "$tmp/gpu.xml" >/dev/null &&
  cmp -s "$tmp/old/topology.nccl.xml" "$tmp/new/topology.nccl.xml" &&
  [[ $("$topo" show --nccl-xml "$tmp/gpu.xml" --cache "$tmp/old/topology.cache" --format env) == \
     $("$topo" show --nccl-xml "$tmp/gpu.xml" --format env) ]] &&
  echo "ok: old form --write-cache writes the same cache" || { echo "FAIL: old form --write-cache"; fails=$((fails + 1)); }
echo "cli_errors: $fails failure(s)"
exit $((fails > 0))
