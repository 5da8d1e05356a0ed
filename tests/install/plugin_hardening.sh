#!/usr/bin/env bash
# The plugin is built as Slurm sites expect of code loaded into slurmd/slurmstepd: full RELRO,
# immediate binding, stack protector, _FORTIFY_SOURCE; and it exports only the SPANK symbols.
# Usage: plugin_hardening.sh train_runtime.so
set -uo pipefail
so=$1
fails=0
check() { if eval "$2"; then echo "ok: $1"; else echo "FAIL: $1"; fails=$((fails + 1)); fi; }
check "full RELRO (GNU_RELRO segment)" "readelf -lW '$so' | grep -q GNU_RELRO"
check "immediate binding (BIND_NOW)" "readelf -dW '$so' | grep -qE 'BIND_NOW|FLAGS_1.*NOW'"
check "stack protector (__stack_chk_fail imported)" "nm -D '$so' | grep -q __stack_chk_fail"
check "_FORTIFY_SOURCE (checked libc calls imported)" "nm -D '$so' | grep -qE '__[a-z_]+_chk'"
exports=$(nm -D --defined-only "$so" | awk '{print $3}' | sort | tr '\n' ' ')
want="plugin_name plugin_type plugin_version slurm_spank_init slurm_spank_init_post_opt slurm_spank_task_init slurm_spank_user_init spank_plugin_version "
check "exports only SPANK symbols ($exports)" "[[ '$exports' == '$want' ]]"
echo "plugin hardening: $((5 - fails)) passed, $fails failed"
exit $((fails > 0))
