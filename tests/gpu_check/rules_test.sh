#!/usr/bin/env bash
# gpu-check's timing and failure rules, without a GPU, on this Debian CPU machine:
#  1. the plan: the device-tool calls read out of docs/gpu-check.md (not copied here) stay within
#     the tool's limits (command <= 2,000 characters, <= 8 carry paths, timeout_s <= 600, one
#     15-minute lease: plan_check.py, whose rules gpu_check.plan_rules tests on their own), their
#     gpu-check invocations are valid (--dry-run), together run every GPU step, and the working
#     tree plus the carry `prepare` makes fit in 64 MiB;
#  2. a target that fails to build (the --test-break-target hook) fails only the steps that need
#     it: a fake step needing another target, and one needing none, still run and pass; the same
#     run builds against a carried nccl.h, chosen by the NCCL wheel's version (a wheel without one);
#  3. a slow fake step is cut by --budget: the report lists every earlier step as passed, the cut
#     one as failed by the budget, the next one as not run;
#  4. a run killed (SIGKILL, as the device tool's limit does) during a step leaves a report that
#     lists every step finished before, marked incomplete, and the log archive;
#  5. configure runs under the budget too (a cmake that hangs is cut), and `die` writes a report.
# Exit 77 where it cannot run: no dpkg/apt-get/pip (not a Debian machine like CI's), no network for
# `prepare`, no cmake, ninja or nvcc, or a GPU present (then run the real gpu-check).
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
check=$repo/scripts/gpu-check.sh
for t in dpkg-query apt-get ninja cmake python3; do
  command -v "$t" >/dev/null || { echo "SKIPPED: $t is missing (needs a Debian machine with cmake, ninja and python3)"; exit 77; }
done
python3 -m pip --version >/dev/null 2>&1 || { echo "SKIPPED: python3 has no pip (prepare downloads the nanobind wheel)"; exit 77; }
command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]] || { echo "SKIPPED: no CUDA toolkit (nvcc): gpu-check configures with CUDA on"; exit 77; }
if nvidia-smi -L 2>/dev/null | grep -q "^GPU "; then echo "SKIPPED: a GPU is present: run scripts/gpu-check.sh run instead"; exit 77; fi

work=$(mktemp -d /tmp/gpu-check-rules.XXXXXX)
trap 'rm -rf "$work"' EXIT
failures=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $1"; shift; for l in "$@"; do echo "      $l"; done; failures=$((failures + 1)); }
# The table rows of a report: "| name | result |".
row() { grep -E "^\| $2 \| $3 \|" "$1/gpu-check-report.md" >/dev/null 2>&1; }
table() { sed -n '/^| step/,/^$/p' "$1/gpu-check-report.md" 2>/dev/null; }

out=$(bash "$check" prepare --carry "$work/carry" 2>&1); rc=$?
if ((rc != 0)); then
  if grep -qE "apt-get download .* failed|pip download .* failed" <<<"$out"; then
    echo "SKIPPED: prepare could not download (no network or no package lists): $(tail -2 <<<"$out")"; exit 77
  fi
  fail "prepare (exit $rc)" "$out"; echo "1 failure(s)"; exit 1
fi

# 1. the plan, from the docs
plan=$(python3 "$repo/tests/gpu_check/plan_check.py" "$repo/docs/gpu-check.md" 2>&1); rc=$?
if ((rc != 0)); then fail "the plan's calls in docs/gpu-check.md (exit $rc)" "$plan"
else
  steps_seen=""
  while IFS=$'\t' read -r n len carry inv; do
    # What travels with this call: the working tree and its carry paths (gpu-carry is what
    # `prepare` made, here in the test's folder).
    paths=()
    for p in $carry; do [[ $p == gpu-carry ]] && paths+=("$work/carry") || paths+=("$repo/$p"); done
    bytes=$(repo=$repo; source "$repo/scripts/gpu_check/lib.sh"; travel_bytes "${paths[@]}")
    # shellcheck disable=SC2086  # the invocation's words, as the device tool's shell splits them
    dry=$(cd "$repo" && OUT=$work/plan-out eval "bash $inv --dry-run" 2>&1); drc=$?
    if ((drc == 0 && len <= 2000 && bytes <= 64 * 1024 * 1024)) && grep -q "plan: steps" <<<"$dry"; then
      pass "call $n: $len characters, carry '$carry', $((bytes / 1024)) KiB travel; $(grep -o 'plan: steps [a-z ]*' <<<"$dry")"
      steps_seen+=" $(grep -o 'plan: steps [a-z ]*' <<<"$dry" | cut -d' ' -f3-)"
    else fail "call $n ($len characters, $bytes bytes; --dry-run exit $drc)" "$inv" "$dry"; fi
  done <<<"$plan"
  absent_steps=$(for s in tests kernels ncu sanitizer nccl ckpt trainer; do grep -qw "$s" <<<"$steps_seen" || echo "$s"; done)
  if [[ -z $absent_steps ]]; then pass "the calls together run every GPU step:$steps_seen"
  else fail "no call of the plan runs: $absent_steps" "$plan"; fi
fi

# 2. a broken target; a wheel without nccl.h
mkdir -p "$work/site/nvidia/nccl/lib" "$work/site/nvidia_nccl_cu13-2.28.9.dist-info"
nccl_so=$(ls /usr/local/cuda/lib*/libnccl.so.2 /usr/local/cuda/targets/*/lib/libnccl.so.2 2>/dev/null | head -1)
ln -s "$nccl_so" "$work/site/nvidia/nccl/lib/libnccl.so.2"
out=$(bash "$check" run --no-gpu --carry "$work/carry" --prefix "$work/prefix" --build "$work/build" --out "$work/o2" --jobs 2 \
      --budget 3000 --nccl-root "$work/site/nvidia/nccl" --test-break-target trainrt_bootstrap \
      --test-fake-steps "needs-common:0:common/libtrainrt_common.a,needs-bootstrap:0:pmix_bootstrap/libtrainrt_bootstrap.a,after:0" 2>&1); rc=$?
if ((rc == 1)) && row "$work/o2" build FAIL && grep -q "NOT built: pmix_bootstrap/libtrainrt_bootstrap.a" "$work/o2/gpu-check-report.md" &&
   row "$work/o2" needs-common PASS && row "$work/o2" needs-bootstrap FAIL && row "$work/o2" after PASS; then
  pass "a target that fails to build fails only the step that needs it (build FAIL, needs-bootstrap FAIL, needs-common and after PASS)"
else fail "broken target (exit $rc)" "$out" "$(table "$work/o2")"; fi
if grep -q "^NCCL_INCLUDE_DIR:PATH=$work/carry/nccl/2.28.9/include$" "$work/build/CMakeCache.txt" &&
   row "$work/o2" pins PASS && grep -q "the carried nccl.h of 2.28.9 (the wheel has none)" "$work/o2/gpu-check-report.md" &&
   grep -q "part NCCL.*2.28.9 ($work/site/nvidia/nccl/lib/libnccl.so.2)" <(tar -xOzf "$work/o2/gpu-check-logs.tar.gz" logs/configure.log); then
  pass "a wheel without nccl.h: the carried header of its version (2.28.9) with the wheel's library, said in the report"
else fail "the carried nccl.h was not used as it should be" "$(grep -E '^NCCL_(INCLUDE_DIR|LIBRARY)' "$work/build/CMakeCache.txt")" "$(table "$work/o2")"; fi
if grep -qF -- "-I$work/prefix/nanobind-2.9.2/nanobind/include" "$work/build/build.ninja"; then
  pass "the module compiles against the carried nanobind $(grep -o 'nanobind==[0-9.]*' "$repo/scripts/python-env.sh")"
else fail "the module does not compile against the carried nanobind" "$(grep -o -- '-I[^ ]*nanobind/include' "$work/build/build.ninja" | sort -u)"; fi

# 3. the budget cuts a slow step (--keep: no configure, so the fake steps start at once)
t0=$SECONDS
out=$(bash "$check" run --no-gpu --keep --carry "$work/carry" --prefix "$work/prefix" --build "$work/build" --out "$work/o3" \
      --budget 15 --test-fake-steps "first:0,second:1,slow:600,after:0" 2>&1); rc=$?
if ((rc == 1 && SECONDS - t0 < 60)) && row "$work/o3" first PASS && row "$work/o3" second PASS &&
   grep -qE "^\| slow \| FAIL \| [0-9]+ \| cut after [0-9]+ s \(the time budget of 15 s\)" "$work/o3/gpu-check-report.md" &&
   row "$work/o3" after "NOT RUN" && grep -q "verdict: \*\*FAIL\*\*" "$work/o3/gpu-check-report.md"; then
  pass "a 600 s step under --budget 15 is cut after $((SECONDS - t0)) s; the report keeps first and second (PASS), slow (FAIL, budget), after (NOT RUN)"
else fail "budget cut (exit $rc after $((SECONDS - t0)) s)" "$out" "$(table "$work/o3")"; fi

# 4. killed in the middle of a step
setsid bash "$check" run --no-gpu --keep --carry "$work/carry" --prefix "$work/prefix" --build "$work/build" --out "$work/o4" \
  --budget 600 --test-fake-steps "first:0,second:0,slow:600,after:0" >"$work/o4.log" 2>&1 &
pid=$!
disown "$pid"  # no "Killed" notice from this shell
for _ in $(seq 1 120); do row "$work/o4" second PASS && break; sleep 0.5; done
sleep 1
# Everything of that run: its session (setsid made $pid the leader; `timeout` puts each step in a
# process group of its own, so killing the group alone would leave the step's sleep behind).
pkill -KILL -s "$pid"
for _ in $(seq 1 50); do pgrep -s "$pid" >/dev/null || break; sleep 0.1; done
if row "$work/o4" first PASS && row "$work/o4" second PASS && grep -q "verdict: INCOMPLETE" "$work/o4/gpu-check-report.md" &&
   tar -tzf "$work/o4/gpu-check-logs.tar.gz" | grep -q "logs/fake-second.log" && ! ls "$work/o4"/*.tmp >/dev/null 2>&1; then
  pass "killed during a step: the report lists the steps finished before (first, second), says INCOMPLETE; the log archive is there"
else fail "report after a kill" "$(cat "$work/o4.log")" "$(table "$work/o4")" "$(ls -la "$work/o4" 2>&1)"; fi

# 5. a configure that hangs is cut by the budget, and a run that dies still writes its report
mkdir -p "$work/bin"
cat >"$work/bin/cmake" <<EOF
#!/bin/sh
# a cmake that answers --version and otherwise hangs
[ "\$1" = --version ] && exec "$(command -v cmake)" --version
sleep 600
EOF
chmod +x "$work/bin/cmake"
t0=$SECONDS
out=$(PATH=$work/bin:$PATH bash "$check" run --no-gpu --carry "$work/carry" --prefix "$work/prefix5" --build "$work/build5" \
      --out "$work/o5" --budget 20 2>&1); rc=$?
if ((rc == 1 && SECONDS - t0 < 60)) && grep -qE "^\| configure \| FAIL \| [0-9]+ \| cut after" "$work/o5/gpu-check-report.md"; then
  pass "a configure that hangs is cut at the budget ($((SECONDS - t0)) s in all) and reported"
else fail "hanging configure (exit $rc after $((SECONDS - t0)) s)" "$out" "$(table "$work/o5")"; fi
mkdir -p "$work/empty-carry"
out=$(bash "$check" run --no-gpu --carry "$work/empty-carry" --prefix "$work/prefix6" --build "$work/build6" --out "$work/o6" 2>&1); rc=$?
if ((rc == 1)) && grep -qE "^\| fatal \| FAIL \| [0-9]+ \| missing on this machine:.*MANIFEST.tsv" "$work/o6/gpu-check-report.md"; then
  pass "die writes a report: $(grep -m1 '^| fatal' "$work/o6/gpu-check-report.md" | cut -c1-100)..."
else fail "die without a report (exit $rc)" "$out" "$(ls "$work/o6" 2>&1)"; fi

[[ $failures -eq 0 ]] && echo "all passed" || { echo "$failures failure(s)"; exit 1; }
