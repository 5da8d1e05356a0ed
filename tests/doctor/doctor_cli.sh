#!/bin/bash
# trainrt-doctor's command line on crafted run folders: exit codes 0/1/2, text, --json (parsed by
# python3's json), --culprit-nodes, and a node name with control bytes arriving escaped.
set -u
doctor=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() {  # check NAME EXPECTED_RC ACTUAL_RC
  if [[ $2 -ne $3 ]]; then echo "FAIL: $1: exit $3, expected $2"; fail=1; else echo "ok: $1 (exit $3)"; fi
}
expect_in() {  # expect_in NAME TEXT PATTERN
  if ! grep -qF -- "$3" <<< "$2"; then echo "FAIL: $1: no '$3' in:"; echo "$2"; fail=1; fi
}
metrics() {  # metrics RANK NODE WORLD END(0/1)
  printf '{"event":"start","wall":1000.0,"restored_step":0,"world":%s,"restart_count":0,"device":"cpu","node":"%s","rank":%s}\n' "$3" "$2" "$1"
  for s in 1 2 3 4 5 6; do
    printf '{"event":"step","step":%s,"wall":100%s.0,"step_s":0.012,"samples_per_s":1.0,"allreduce_s":0.002,"allreduce_busbw_gbs":1.0,"ckpt_stall_s":0.0,"ckpt_persist_s":null,"loss":0.5}\n' $s $s
  done
  [[ $4 -eq 1 ]] && printf '{"event":"end","wall":1007.0,"step":6}\n'
  return 0
}
flight() {  # flight RANK REASON
  printf '{"rank":%s,"reason":"%s","last_completed":6,"in_flight":7,"ops":[{"seq":6,"op":"allreduce(grads)","bytes":4096,"start_s":1.0,"end_s":1.5},{"seq":7,"op":"allreduce(grads)","bytes":4096,"start_s":2.0,"end_s":null}]}\n' "$1" "$2"
}

mkdir "$tmp/healthy" "$tmp/hang" "$tmp/empty" "$tmp/escape"
for r in 0 1 2 3; do metrics $r node$((r / 2)) 4 1 > "$tmp/healthy/metrics_rank$r.jsonl"; done
out=$("$doctor" "$tmp/healthy"); check healthy 0 $?
expect_in healthy "$out" "verdict: healthy"

for r in 0 1 2 3; do metrics $r node$((r / 2)) 4 0 > "$tmp/hang/metrics_rank$r.jsonl"; done
for r in 0 1 2; do flight $r "step 7: shm: rank $r: allreduce #7 (arrive) timed out after 5000 ms waiting for rank(s) 3" > "$tmp/hang/flight_rank$r.json"; done
out=$("$doctor" "$tmp/hang"); check hang 1 $?
expect_in hang "$out" "collective: #7 allreduce(grads) 4096 B"
expect_in hang "$out" "never arrived: rank 3 on node1"
expect_in hang "$out" "waited: rank 0 on node0 for 5.0 s"
expect_in hang "$out" "exclude on rerun: node1"
out=$("$doctor" "$tmp/hang" --json); check hang-json 1 $?
python3 -c 'import json,sys; j=json.loads(sys.stdin.read()); assert j["verdict"]=="hang" and j["culprit_nodes"]==["node1"] and j["collective"]["seq"]==7, j' <<< "$out" \
  || { echo "FAIL: --json output"; fail=1; }
out=$("$doctor" "$tmp/hang" --culprit-nodes); check culprit-nodes 1 $?
[[ $out == node1 ]] || { echo "FAIL: --culprit-nodes printed '$out'"; fail=1; }
out=$("$doctor" "$tmp/healthy" --culprit-nodes); check culprit-nodes-healthy 0 $?
[[ -z $out ]] || { echo "FAIL: --culprit-nodes on a healthy run printed '$out'"; fail=1; }

"$doctor" "$tmp/empty" > "$tmp/empty.out"; check empty-dir 2 $?
"$doctor" "$tmp/no-such-dir" > "$tmp/nodir.out"; check missing-dir 2 $?
expect_in missing-dir "$(cat "$tmp/nodir.out")" "verdict: bad-input"
"$doctor" > /dev/null 2>&1; check no-argument 2 $?
"$doctor" "$tmp/healthy" --threshold -1 > /dev/null 2>&1; check bad-threshold 2 $?

# A missing rank and a cut line: one line per problem, exit 2 (no clean bill).
cp "$tmp/healthy"/metrics_rank{0,1,2}.jsonl "$tmp/empty/"
printf '{"event":"step","st' >> "$tmp/empty/metrics_rank2.jsonl"
out=$("$doctor" "$tmp/empty"); check partial 2 $?
expect_in partial "$out" "note: 1 rank(s) of 4 left no file: 3"
expect_in partial "$out" "note: metrics_rank2.jsonl: last line cut short"

for r in 0 1; do metrics $r 'evil\u001b[2J\u0001' 2 1 > "$tmp/escape/metrics_rank$r.jsonl"; done
flight 0 "step 7: rank 1 (pid 9) died" > "$tmp/escape/flight_rank0.json"
out=$("$doctor" "$tmp/escape"); check escape 1 $?
if LC_ALL=C grep -q $'\033' <<< "$out"; then echo "FAIL: an escape byte reached the terminal"; fail=1; fi
expect_in escape "$out" 'evil\x1b[2J\x01'
exit $fail
