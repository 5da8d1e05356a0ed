#!/usr/bin/env bash
# trainrt-ckpt against real checkpoints (written by ckpt_mp): listing, verifying, a damaged step
# named with the step a restore would fall back to, and every bad input ending in exit 2.
# Usage: ckpt_cli.sh TRAINRT_CKPT CKPT_MP
set -uo pipefail
tool=$1 mp=$2
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
fails=0
check() {  # check NAME EXPECTED_RC GREP_PATTERN -- command...
  local name=$1 want=$2 pattern=$3; shift 4
  local out rc
  out=$("$@" 2>&1); rc=$?
  if [ "$rc" -ne "$want" ] || ! grep -qE -- "$pattern" <<<"$out"; then
    echo "FAIL $name: rc=$rc (want $want), pattern '$pattern' in:"; echo "$out" | sed 's/^/    /'; fails=$((fails + 1))
  else
    echo "ok   $name"
  fi
}
"$mp" cycle "$d" 3 >/dev/null  # steps 0, 1, 2; keep_last 2 leaves 1 and 2 || { echo "FAIL: ckpt_mp could not write checkpoints"; exit 1; }
check "list shows the latest step"        0 '^ +2 +committed +1 .*<- latest'        -- "$tool" list "$d"
check "verify: newest step intact"        0 'OK: step 2 is intact'                  -- "$tool" verify "$d"
check "list --json is JSON"               0 '"latest": 2'                           -- "$tool" list "$d" --json
python3 - "$d/step_000000000002/rank_00000.shard" <<'PY'
import sys
with open(sys.argv[1], 'r+b') as f:
    f.seek(4096 + 10); b = f.read(1); f.seek(4096 + 10); f.write(bytes([b[0] ^ 1]))
PY
check "verify: flipped bit named"         1 "entry 'weights' in rank_00000.shard fails its checksum" -- "$tool" verify "$d"
check "verify: says where restore goes"   1 'a restore would fall back to step 1'   -- "$tool" verify "$d"
check "verify --step of a good step"      0 'OK: step 1 is intact'                  -- "$tool" verify "$d" --step 1
check "verify --json carries problems"    1 'fails its checksum'                    -- "$tool" verify "$d" --json
check "unknown step"                      2 'has no step 99'                        -- "$tool" verify "$d" --step 99
check "missing directory"                 2 '/nonexistent-trainrt: cannot read'     -- "$tool" verify /nonexistent-trainrt
check "no subcommand"                     2 'subcommand is required'                -- "$tool"
check "bad step value"                    2 'step'                                  -- "$tool" verify "$d" --step x
check "unknown option"                    2 'frob'                                  -- "$tool" list "$d" --frob
exit $((fails > 0))
