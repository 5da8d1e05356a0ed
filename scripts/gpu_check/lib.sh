# gpu-check's shared helpers (sourced by scripts/gpu-check.sh): messages, the step results and
# the report, the time budget, safe folders and .deb unpacking.
# shellcheck shell=bash

say() { echo "gpu-check: $*"; }

# A fatal error. Once `run` has an output folder, the report is written first, with the error as
# its last row: a run that dies in preflight or configure still brings back why.
die() {
  echo "gpu-check: FAIL: $*" >&2
  if ((${reporting:-0})); then
    local one_line=${*//$'\n'/ }
    results+=("fatal|FAIL|$(elapsed 0)|${one_line//|//}")
    failed=1
    write_report final
  fi
  exit 1
}

# ---------------------------------------------------------------------------------- results
# One row per step: "name|PASS, FAIL, NOT RUN or OMITTED|seconds|note". OMITTED is a planned
# leaving-out (the 8 GiB checkpoint without the memory for it) and fails nothing; NOT RUN (no
# budget left to start it) fails the run like FAIL does.
results=()
failed=0
step_result() {
  local note=${4//$'\n'/ }
  results+=("$1|$2|$3|${note//|//}")
  [[ $2 == PASS || $2 == OMITTED ]] || failed=1
  say "$1: $2${4:+ ($4)}"
  ((${reporting:-0})) && write_report
  return 0
}
elapsed() { echo $((SECONDS - $1)); }

# Seconds left of --budget, at least 1 (`timeout 0` would mean no limit at all).
remaining() { local r=$((budget - SECONDS)); ((r < 1)) && r=1; echo "$r"; }
# The timeout of a step: what is left of the budget, or CAP if less.
cap_at() { local r; r=$(remaining); ((r > $1)) && r=$1; echo "$r"; }
# rc of `timeout`: 124 (TERM) or 137 (KILL after -k).
timed_out() { [[ $1 -eq 124 || $1 -eq 137 ]]; }

# run_timed NAME LOG CAP CMD...: CMD under the budget (at most CAP seconds), its output in LOG;
# PASS on exit 0. Each step is its own process group under `timeout`, so a hung child dies too.
run_timed() {
  local name=$1 log=$2 cap=$3 t0=$SECONDS rc left; shift 3
  left=$(remaining)
  if ((left < 5)); then step_result "$name" "NOT RUN" 0 "time budget spent ($budget s)"; return 1; fi
  timeout -k 10 "$(cap_at "$cap")" "$@" >"$logs/$log" 2>&1
  rc=$?
  if ((rc == 0)); then step_result "$name" PASS "$(elapsed "$t0")" "$log"; return 0; fi
  local why="exit $rc"
  if timed_out "$rc"; then
    why="cut after $(elapsed "$t0") s ($( ((cap < left)) && echo "its cap of $cap s" || echo "the time budget of $budget s"))"
  fi
  step_result "$name" FAIL "$(elapsed "$t0")" "$why; $log: $(tail -1 "$logs/$log" | cut -c1-200)"
  return 1
}

# needs NAME TARGET...: true when every target built; else a FAIL row naming the ones that did not.
needs() {
  local name=$1 t missing=(); shift
  for t in "$@"; do [[ " ${built_targets[*]} " == *" $t "* ]] || missing+=("$t"); done
  ((${#missing[@]} == 0)) && return 0
  step_result "$name" FAIL 0 "not built: ${missing[*]} (see build.log)"
  return 1
}

# ---------------------------------------------------------------------------------- report
# Rewritten after every step, to a temporary name and then moved: a run killed at any moment (the
# device tool's 10 minutes) leaves the last complete report and log archive in the output folder.
write_report() {
  local final=${1:-} report=$out/gpu-check-report.md r name status secs note f verdict
  if [[ -z $final ]]; then verdict="INCOMPLETE: written after ${#results[@]} rows, $SECONDS s in; the run went on (a report that stays like this was cut off)"
  elif ((failed)); then verdict="**FAIL**"
  else verdict="**PASS**"; fi
  {
    echo "# gpu-check report"
    echo
    echo "- verdict: $verdict$( ((no_gpu)) && echo ' (--no-gpu: nothing ran on a GPU)'); steps: ${steps:-none: the test hook fake steps}"
    echo "- when: $(date -u +%FT%TZ), $SECONDS s in all (budget $budget s); commit $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$repo" status --porcelain 2>/dev/null | grep -q . && echo ' (with local changes)')"
    echo "- machine: $(nproc) cores, $(awk '/MemAvailable/ {printf "%.0f GiB available", $2 / 1048576}' /proc/meminfo); ${gpu_line:-no GPU}${driver:+; driver $driver}"
    echo "- tools: ${tools_line:-(preflight not reached)}"
    echo "- CUDA architectures: ${cuda_arch:-?}; NCCL: ${nccl_line:-(not chosen yet)}; nanobind: ${nanobind_line:-(not chosen yet)}"
    echo "- prefix: $prefix; build: $build"
    echo
    echo "| step | result | s | note |"
    echo "|---|---|---|---|"
    for r in "${results[@]}"; do
      IFS='|' read -r name status secs note <<<"$r"
      echo "| $name | $status | $secs | $note |"
    done
    echo
    if [[ -f $carry/debs/MANIFEST.tsv ]]; then
      echo "## Carried packages"
      echo '```'
      # The GPU machine has no column(1) (bsdextrautils): tabs stay tabs there.
      local table
      for table in "$carry/debs/MANIFEST.tsv" "$carry/CARRY.tsv"; do
        [[ -f $table ]] || continue
        if command -v column >/dev/null; then column -t -s $'\t' "$table"; else cat "$table"; fi | cut -c1-140
      done
      echo '```'
    fi
    for f in build.log gpu-tests.log kernels-bench.log kernels-torch.log ncu-kernels.txt nccl-bench.log nccl-torch.log \
             ckpt-device-bench.log ckpt-device-torch.log ckpt-device-bench-big.log ckpt-device-torch-big.log \
             trainer-gpu.log torch-train.log; do
      [[ -s $logs/$f ]] || continue
      echo "## $f (last 60 lines)"
      echo '```'
      tail -n 60 "$logs/$f" | cut -c1-300
      echo '```'
    done
    for f in "$logs"/sanitizer-*.log; do
      [[ -f $f ]] || continue
      grep -q "ERROR SUMMARY: 0 error\|RACECHECK SUMMARY: 0 hazard" "$f" && continue
      echo "## $(basename "$f") (first 40 lines: no clean summary line)"
      echo '```'; head -n 40 "$f" | cut -c1-300; echo '```'
    done
  } >"$report.tmp" && mv -f "$report.tmp" "$report"
  # What comes back is limited to 16 MiB a file: the largest logs give way first, named in a list.
  local tarball=$out/gpu-check-logs.tar.gz
  tar -czf "$tarball.tmp" -C "$(dirname "$logs")" "$(basename "$logs")" 2>/dev/null
  if (($(stat -c %s "$tarball.tmp" 2>/dev/null || echo 0) > 15 * 1024 * 1024)); then
    find "$logs" -type f -size +2M -printf '%P %s bytes\n' >"$logs/LEFT-OUT.txt"
    tar -czf "$tarball.tmp" -C "$(dirname "$logs")" --exclude-from=<(find "$logs" -type f -size +2M -printf 'logs/%P\n') \
      "$(basename "$logs")" 2>/dev/null
  fi
  mv -f "$tarball.tmp" "$tarball"
  [[ -n $final ]] && say "report: $report (logs: $tarball)"
  return 0
}

# ---------------------------------------------------------------------------------- folders
# Empties DIR for a fresh start, but only a DIR this script made (it holds MARKER) or an empty one:
# a mistyped --prefix /usr must never be deleted.
fresh_dir() {
  local dir=$1 marker=$2
  if [[ -e $dir && -n $(ls -A "$dir" 2>/dev/null) && ! -e $dir/$marker ]]; then
    die "$dir exists, is not empty and was not made by gpu-check (no $marker in it): name another folder"
  fi
  rm -rf "$dir" && mkdir -p "$dir" && touch "$dir/$marker" || die "cannot create $dir"
}

any_exists() { local f; for f in "$@"; do [[ -e $f ]] && return 0; done; return 1; }

# Unpacks one .deb with dpkg -x, or, where dpkg is missing, with Python (ar + tar, as dpkg-deb).
unpack_deb() {
  if command -v dpkg >/dev/null; then dpkg -x "$1" "$2"; return; fi
  python3 - "$1" "$2" <<'PY'
import io, sys, tarfile
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"!<arch>\n", "not an ar archive"
pos = 8
while pos < len(data):
    name, size = data[pos:pos + 16].decode().strip().rstrip("/"), int(data[pos + 48:pos + 58])
    body = data[pos + 60:pos + 60 + size]
    if name.startswith("data.tar"):
        tarfile.open(fileobj=io.BytesIO(body)).extractall(sys.argv[2], filter="tar")
        sys.exit(0)
    pos += 60 + size + (size & 1)
sys.exit("no data.tar member")
PY
}

# What travels to the GPU machine, in bytes: the checkout's tracked and untracked-not-ignored files
# plus each carried path.
travel_bytes() {
  local tree carried=0 p
  tree=$(cd "$repo" && git ls-files -z -co --exclude-standard | xargs -0 -r stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
  for p in "$@"; do [[ -e $p ]] && carried=$((carried + $(du -sb "$p" | cut -f1))); done
  echo $((tree + carried))
}
