#!/usr/bin/env bash
# The plan in docs/gpu-check.md fits one lease (tests/gpu_check/plan_check.py), and the check can
# fail: copies of the doc with each rule broken once must be refused, naming the rule. Then the
# presets of `--call 1|2` match the doc's blocks (--dry-run: the same plan line either way).
# Needs python3 and bash only, no GPU, no network.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
doc=$repo/docs/gpu-check.md check=$repo/tests/gpu_check/plan_check.py
work=$(mktemp -d) && trap 'rm -rf "$work"' EXIT
fail=0
ok() { echo "PASS $1"; }
bad() { echo "FAIL $1"; shift; printf '  %s\n' "$@"; fail=1; }

out=$(python3 "$check" "$doc" 2>&1) && [[ $(grep -c $'^[0-9]\t' <<<"$out") -ge 2 ]] && ok "the plan in the doc: $(wc -l <<<"$out") calls within the limits" ||
  bad "the plan in docs/gpu-check.md" "$out"

# mutate NAME SED-EXPRESSION WANTED-MESSAGE: the doc with one rule broken must be refused.
mutate() {
  sed -E "$2" "$doc" >"$work/doc.md"
  if cmp -s "$doc" "$work/doc.md"; then bad "$1: the mutation changed nothing (the doc's blocks moved?)"; return; fi
  local o rc
  o=$(python3 "$check" "$work/doc.md" 2>&1); rc=$?
  if ((rc == 1)) && grep -q "$3" <<<"$o"; then ok "$1: refused ($(grep "$3" <<<"$o" | head -1))"
  else bad "$1: exit $rc, wanted 1 naming '$3'" "$o"; fi
}
mutate "timeouts past the lease" '0,/"timeout_s": [0-9]+/s//"timeout_s": 600/' "exceed the lease"
mutate "a budget not 30 s inside its timeout" '0,/--budget [0-9]+/s//--budget 495/' "is not at least 30 s inside"
mutate "a call with no budget" '0,/ --budget [0-9]+/s///' "is not at least 30 s inside"
mutate "a timeout over the tool's 600 s" '0,/"timeout_s": [0-9]+/s//"timeout_s": 601/' "timeout_s 601 is not 1..600"

# The doc's blocks spell their settings out; `--call N` alone must give the same plan.
while IFS=$'\t' read -r n _ _ inv; do
  spelled=$(cd "$repo" && OUT=$work/o eval "bash $inv --dry-run" 2>&1)
  preset=$(cd "$repo" && OUT=$work/o bash scripts/gpu-check.sh run --call "$n" --out "$work/o" --dry-run 2>&1)
  [[ $spelled == "$preset" && $spelled == *"plan: steps"* ]] && ok "call $n: --call $n alone gives the doc's plan" ||
    bad "call $n: the doc's block and --call $n differ" "block:  $spelled" "preset: $preset"
done < <(python3 "$check" "$doc" 2>/dev/null)
exit $fail
