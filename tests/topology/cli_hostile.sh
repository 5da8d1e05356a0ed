#!/usr/bin/env bash
# trainrt-topo never dies on input: under the default 8 MiB stack, 1 GiB of
# address space and a timeout, every hostile file or value ends in exit 2 and one printable line
# on stderr; names with control bytes or invalid UTF-8 come out escaped in the table and the JSON.
set -u
topo=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# Runs trainrt-topo ARGS... under the limits; sets rc, out, err.
limited() {
  ( ulimit -s 8192 && ulimit -v 1048576 && exec timeout 30 "$topo" "$@" ) >"$tmp/out" 2>"$tmp/err"
  rc=$?
  out=$(cat "$tmp/out")
  err=$(cat "$tmp/err")
}

# No byte below 0x20 but newline, no DEL, no ESC anywhere.
printable() { ! LC_ALL=C grep -q $'[\x01-\x09\x0b-\x1f\x7f]' "$1"; }

expect_error() {  # expect_error WORD-IN-MESSAGE ARGS...
  local want=$1; shift
  limited "$@"
  local lines; lines=$(grep -c '' "$tmp/err")
  if [[ $rc -ne 2 || $lines -ne 1 || $err != *"$want"* ]] || ! printable "$tmp/err"; then
    fail "trainrt-topo $* -> rc=$rc, $lines line(s) on stderr: $(head -c 300 "$tmp/err" | cat -v)"
  else
    echo "ok: ${*:1:3} ... -> $(head -c 160 "$tmp/err")"
  fi
}

deep=100000
{
  printf '<system version="1"><cpu numaid="0" affinity="0000000f">'
  for ((i = 0; i < deep; i++)); do printf '<pci busid="0000:01:00.0">'; done
  for ((i = 0; i < deep; i++)); do printf '</pci>'; done
  printf '</cpu></system>\n'
} >"$tmp/deep-nccl.xml"
{
  printf '<topology version="2.0"><object type="Machine" cpuset="0x1" complete_cpuset="0x1" nodeset="0x1" complete_nodeset="0x1">'
  for ((i = 0; i < deep; i++)); do printf '<object type="Group" cpuset="0x1" complete_cpuset="0x1">'; done
  for ((i = 0; i < deep; i++)); do printf '</object>'; done
  printf '</object></topology>\n'
} >"$tmp/deep-hwloc.xml"
expect_error "nested more than" show --nccl-xml "$tmp/deep-nccl.xml" --policy numa
expect_error "nested more than" show --xml "$tmp/deep-nccl.xml" --policy numa
expect_error "nested more than" show --xml "$tmp/deep-hwloc.xml" --policy numa

printf '<system version="1"><cpu numaid="0" affinity="1%s"/></system>' "$(printf '%0600d' 0 | tr 0 ,)" >"$tmp/wide.xml"
expect_error "words" show --nccl-xml "$tmp/wide.xml" --policy numa
printf '<system version="1"><cpu numaid="4294967296" affinity="f"/></system>' >"$tmp/numa.xml"
expect_error "numaid" show --nccl-xml "$tmp/numa.xml" --policy numa
truncate -s 17M "$tmp/huge.xml"
expect_error "MiB limit" show --xml "$tmp/huge.xml"
mkfifo "$tmp/fifo.xml"
expect_error "not a regular file" show --xml "$tmp/fifo.xml"
expect_error "not a regular file" show --nccl-xml /dev/zero

# A bus id that carries an escape sequence, a newline (&#10;) and invalid UTF-8 into the message.
printf '<system version="1"><cpu numaid="0" affinity="f"><pci busid="\033[31mred&#10;second line\377" class="0x030200"/></cpu></system>' >"$tmp/esc.xml"
expect_error "bad busid" show --nccl-xml "$tmp/esc.xml"

# Values on the command line are bounded too.
printf '<system version="1"><cpu numaid="0" affinity="f"/></system>' >"$tmp/small.xml"
expect_error "cpu list" show --nccl-xml "$tmp/small.xml" --policy numa --cpus 0-4000000000
expect_error "--tasks" show --nccl-xml "$tmp/small.xml" --policy numa --tasks 4000000000
expect_error "--tasks" show --nccl-xml "$tmp/small.xml" --policy numa --tasks 4294967296
expect_error "bad\\x1b" show --nccl-xml "$tmp/small.xml" --policy numa --gpus $'bad\033[2J'

# Names from a file with control bytes, a C1 CSI (U+009B) and invalid UTF-8: the table escapes
# them, the JSON is valid and carries them as \u escapes or U+FFFD.
printf '<system version="1"><cpu numaid="0" affinity="f">
<pci busid="0000:01:00.0" class="0x030200" vendor="0x10de" device="0x20b0"/>
<pci busid="0000:02:00.0" class="0x020700" vendor="0x15b3" device="0x101b"><nic><net name="mlx5_\033[2J&#10;&#xd;\302\233x\377\376" port="1"/></nic></pci>
</cpu></system>\n' >"$tmp/names.xml"
limited show --nccl-xml "$tmp/names.xml" --tasks 1
if [[ $rc -ne 0 ]]; then
  fail "names.xml table: rc=$rc $(cat -v "$tmp/err")"
elif ! printable "$tmp/out" || LC_ALL=C grep -q $'\xc2\x9b\|\xff' "$tmp/out"; then
  fail "the table passes control bytes or invalid UTF-8 through: $(cat -v "$tmp/out" | grep mlx5)"
elif [[ $out != *'mlx5_\x1b[2J\x0a\x0d\xc2\x9bx\xff\xfe'* ]]; then
  fail "the table does not show the escaped name: $(grep mlx5 "$tmp/out" | head -2)"
else
  echo "ok: table escapes names from the file"
fi
limited show --nccl-xml "$tmp/names.xml" --tasks 1 --format json
if [[ $rc -ne 0 ]]; then
  fail "names.xml json: rc=$rc $(cat -v "$tmp/err")"
elif ! python3 -c 'import json,sys; d=json.load(open(sys.argv[1], encoding="utf-8")); n=d["nics"][0]["name"]; assert n.startswith("mlx5_\x1b[2J\n\r\x9bx") and n.endswith("\ufffd"), repr(n)' "$tmp/out"; then
  fail "the JSON output is not valid UTF-8 JSON with the name escaped"
else
  echo "ok: JSON escapes control bytes and replaces invalid UTF-8"
fi

echo "cli_hostile: $fails failure(s)"
exit $((fails > 0))
