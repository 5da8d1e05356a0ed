#!/usr/bin/env bash
# expect_all_ranks.sh WORD N CMD...: CMD's output must hold WORD on N lines (one per surviving
# rank). For fault tests, where the launcher's own exit status reflects the injected failure.
set -u
word=$1 want=$2
shift 2
out=$("$@" 2>&1)
echo "$out" | grep -E "rank [0-9]+" | head -20
got=$(grep -c "$word" <<<"$out")
echo "$word on $got line(s), expected $want"
[[ $got -eq $want ]]
