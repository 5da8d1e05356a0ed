#!/usr/bin/env bash
# trainrt-topo write-cache / show --cache: a written cache gives the same placement as the file it
# digests; an unusable one (world-writable, a link, stale, corrupt) is exit 2 with one line naming it.
set -u
topo=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
chmod 755 "$tmp"
fails=0
cat > "$tmp/node.xml" <<'XML'
<system version="1"><cpu numaid="0" affinity="0000000f">
  <pci busid="0000:10:00.0" class="0x060400" vendor="0x1000" device="0xc010">
    <pci busid="0000:11:00.0" class="0x030200" vendor="0x10de" device="0x20b0"/>
    <pci busid="0000:12:00.0" class="0x020700" vendor="0x15b3" device="0x101b"/>
  </pci>
</cpu></system>
XML
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
expect_error() {  # expect_error WORD-IN-MESSAGE ARGS...
  local want=$1; shift
  local err rc lines
  err=$("$topo" "$@" 2>&1 >/dev/null); rc=$?
  lines=$(printf '%s\n' "$err" | grep -c .)
  if [[ $rc -ne 2 || $lines -ne 1 || $err != *"$want"* ]]; then
    fail "trainrt-topo $* -> rc=$rc, stderr: $err (wanted exit 2, one line containing '$want')"
  else
    echo "ok: $* -> $err"
  fi
}

"$topo" write-cache "$tmp/c/topology.cache" --nccl-xml "$tmp/node.xml" >/dev/null || fail "write-cache"
[[ $(stat -c %a "$tmp/c/topology.cache") == 644 ]] || fail "cache mode is not 644"
want=$("$topo" show --nccl-xml "$tmp/node.xml" --format env)
got=$("$topo" show --nccl-xml "$tmp/node.xml" --cache "$tmp/c/topology.cache" --format env) || fail "--cache"
[[ "$want" == "$got" ]] && echo "ok: same placement from the cache" || fail "placement from the cache differs"

expect_error "another source" show --cache "$tmp/c/topology.cache"   # a file's cache, asked for the live machine
ln -s "$tmp/c/topology.cache" "$tmp/c/link.cache"
expect_error "link.cache" show --nccl-xml "$tmp/node.xml" --cache "$tmp/c/link.cache"
chmod 666 "$tmp/c/topology.cache"
expect_error "writable by group or others" show --nccl-xml "$tmp/node.xml" --cache "$tmp/c/topology.cache"
chmod 644 "$tmp/c/topology.cache"
printf 'x' >> "$tmp/c/topology.cache"
expect_error "checksum" show --nccl-xml "$tmp/node.xml" --cache "$tmp/c/topology.cache"
"$topo" write-cache "$tmp/c/topology.cache" --nccl-xml "$tmp/node.xml" >/dev/null || fail "rewrite"
sleep 0.02; cp "$tmp/node.xml" "$tmp/node2.xml"; cat "$tmp/node2.xml" > "$tmp/node.xml"
expect_error "stale topology cache: the topology file changed" show --nccl-xml "$tmp/node.xml" --cache "$tmp/c/topology.cache"
expect_error "absolute" write-cache relative.cache --nccl-xml "$tmp/node.xml"
echo "cli_cache: $fails failure(s)"
exit $((fails > 0))
