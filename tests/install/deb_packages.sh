#!/usr/bin/env bash
# The Debian packages CPack writes install with apt and serve a real `srun --train-runtime` step
# through the installed plugin and its plugstack.conf.d line; the plugin package ships, enables and
# runs once the boot-time topology cache unit, so the cache is there right after the install;
# it also ships, enables and mounts the memory tier's huge-page tmpfs (/run/trainrt), which jobs then
# use; purging the packages leaves nothing behind (cache, mount and unit links included).
# A cache some admin wrote before the test is put aside and restored, a tier tmpfs mounted before
# it mounted again.
# Usage: deb_packages.sh BUILD_DIR   (root: installs into /, then purges; exit 77 otherwise)
set -uo pipefail
build=$(cd "$1" && pwd)
repo=$(cd "$(dirname "$0")/../.." && pwd)
cluster=$repo/slurm_examples/local-cluster/cluster.sh
if [[ $(id -u) -ne 0 ]]; then echo "SKIPPED: installing packages needs root"; exit 77; fi
packages=(train-runtime-slurm train-runtime-tools libtrainrt-dev libtrainrt0)
source "$repo/tests/slurm/harness.sh"
cluster_harness debs 8017 8018
cache=/run/train-runtime/topology.cache unit=train-runtime-topology-cache.service
kept=""
if [[ -e $cache ]]; then kept=$(mktemp -d) && cp -a "$(dirname "$cache")/." "$kept/" && rm -f "$cache" "${cache%.cache}.nccl.xml"; fi
restore_cache() { [[ -z $kept ]] || { mkdir -p "$(dirname "$cache")" && cp -a "$kept/." "$(dirname "$cache")/" && rm -rf "$kept"; }; }
tier=/run/trainrt tier_unit=run-trainrt.mount tier_options=""
mountpoint -q "$tier" && tier_options=$(findmnt -no OPTIONS "$tier")
restore_tier() { [[ -n $tier_options ]] && ! mountpoint -q "$tier" && mkdir -p "$tier" && mount -t tmpfs -o "$tier_options" tmpfs "$tier"; return 0; }
trap 'bash "$cluster" stop >/dev/null 2>&1; dpkg --purge "${packages[@]}" >/dev/null 2>&1; restore_cache; restore_tier; rm -rf "$work" "$TRAINRT_CLUSTER_DIR"' EXIT

(cd "$build" && cpack -G DEB -B "$work/pkgs" >"$work/cpack.log" 2>&1) || { fail "cpack" "$(tail -20 "$work/cpack.log")"; exit 1; }
debs=("$work"/pkgs/*.deb)
names=$(for d in "${debs[@]}"; do dpkg-deb -f "$d" Package; done | sort | tr '\n' ' ')
[[ $names == "libtrainrt-dev libtrainrt0 train-runtime-slurm train-runtime-tools " ]] &&
  pass "cpack wrote 4 packages: $names" || fail "package set" "$names"
depends=$(dpkg-deb -f "$work"/pkgs/train-runtime-slurm*.deb Depends)
grep -q "train-runtime-tools (= " <<<"$depends" && pass "the plugin package depends on train-runtime-tools (its boot unit runs trainrt-topo)" ||
  fail "plugin Depends on the tools" "$depends"
read -r yy mm < <(sed -nE 's/.*SLURM_VERSION_NUMBER 0x([0-9a-f]{2})([0-9a-f]{2}).*/\1 \2/p' /usr/include/slurm/slurm_version.h)
slurm_major=$(printf '%d.%02d' "$((16#$yy))" "$((16#$mm))")
grep -q "slurm-wlm-basic-plugins (>= $slurm_major~)" <<<"$depends" && grep -q "slurm-wlm-basic-plugins (<< " <<<"$depends" &&
  pass "the plugin package is pinned to Slurm $slurm_major: $depends" || fail "plugin Depends" "$depends"

if apt-get install -y -qq --no-install-recommends "${debs[@]}" >"$work/apt.log" 2>&1; then
  pass "apt-get installs the 4 packages"
else fail "apt-get install" "$(tail -20 "$work/apt.log")"; exit 1; fi
plugin=$(dpkg -L train-runtime-slurm | grep 'train_runtime.so$')
conf=$(dpkg -L train-runtime-slurm | grep 'plugstack.conf.d/train-runtime.conf$')
slurm_dir=$(dirname "$(dpkg -L slurm-wlm-basic-plugins | grep '/select_cons_tres.so$' | head -1)")
if [[ -f $plugin && -f $conf && $(dirname "$plugin") == "$slurm_dir" && $conf == /etc/slurm/plugstack.conf.d/* ]] &&
   grep -q "^optional $plugin" "$conf" && dpkg-query -W -f='${Conffiles}' train-runtime-slurm | grep -q "$conf"; then
  pass "installed: $plugin (beside Slurm's own plugins) and its plugstack line $conf (a conffile)"
else fail "installed files" "$plugin" "$conf"; fi
unit_file=$(dpkg -L train-runtime-slurm | grep "/$unit\$")
enabled=$(find /etc/systemd/system -name "$unit" -path '*.wants/*' 2>/dev/null | sort | tr '\n' ' ')
verify=$(systemd-analyze verify "$unit_file" 2>&1 | grep -v -e 'slurmd.service' -e 'Cannot add dependency' || true)
if [[ -f $unit_file && $enabled == *multi-user.target.wants/$unit* && $enabled == *slurmd.service.wants/$unit* && -z $verify ]] &&
   grep -q "^Before=slurmd.service" "$unit_file" && grep -q "^ExecStart=$(command -v trainrt-topo) --write-cache $cache\$" "$unit_file"; then
  pass "the boot unit $unit_file is installed, runs trainrt-topo --write-cache before slurmd, enabled: $enabled"
else fail "boot unit" "file '$unit_file', enabled '$enabled'" "$verify"; fi
if [[ -f $cache ]] && trainrt-topo --cache "$cache" --policy none --tasks 1 >/dev/null 2>&1 && [[ $(stat -c '%U %a' "$cache") == "root 644" ]]; then
  pass "apt-get install wrote the topology cache ($cache, $(stat -c %s "$cache") bytes, root 0644), and it reads strictly"
else fail "topology cache after install" "$(ls -la "$(dirname "$cache")" 2>&1)"; fi
tier_file=$(dpkg -L train-runtime-slurm | grep "/$tier_unit\$")
tier_enabled=$(find /etc/systemd/system -name "$tier_unit" -path '*.wants/*' 2>/dev/null | sort | tr '\n' ' ')
verify=$(systemd-analyze verify "$tier_file" 2>&1 | grep -v -e 'slurmd.service' -e 'Cannot add dependency' || true)
if [[ -f $tier_file && $tier_enabled == *multi-user.target.wants/$tier_unit* && -z $verify ]] &&
   grep -q "^Where=$tier\$" "$tier_file" && grep -q "^Options=.*huge=within_size" "$tier_file"; then
  pass "the tier's mount unit $tier_file is installed (huge=within_size), enabled: $tier_enabled"
else fail "tier mount unit" "file '$tier_file', enabled '$tier_enabled'" "$verify"; fi
if [[ $(trainrt-ckpt tier-base 2>&1) == "$tier" && $(stat -fc %T "$tier") == tmpfs && $(stat -c '%U %a' "$tier") == "root 1777" ]]; then
  pass "after the install memory tiers go to $tier (tmpfs, root 1777, $(findmnt -no OPTIONS "$tier" | grep -o 'huge=[a-z_]*'))"
else fail "the tier's tmpfs after install" "$(trainrt-ckpt tier-base 2>&1)" "$(findmnt "$tier" 2>&1)"; fi
trainrt-topo --policy none --tasks 1 --format env >/dev/null; topo_rc=$?
trainrt-ckpt list "$work" >/dev/null 2>&1; ckpt_rc=$?   # 1: no committed step there, as expected
if [[ $topo_rc -eq 0 && $ckpt_rc -le 1 ]]; then
  pass "the installed tools run (trainrt-topo, trainrt-ckpt)"
else fail "installed tools" "$(trainrt-topo --policy none --tasks 1 2>&1 | tail -3)"; fi

bash "$cluster" start --mode live --system-plugstack >/dev/null 2>"$work/start.log" || { fail "cluster" "$(cat "$work/start.log")"; exit 1; }
out=$(srun -n 2 --train-runtime=show bash -c 'echo "T$SLURM_PROCID $TRAINRT_POLICY $LOCAL_RANK"' 2>&1)
if grep -q "^train-runtime: .*step" <<<"$out" && grep -q "^T0 numa 0" <<<"$out" && grep -q "^T1 numa 1" <<<"$out"; then
  pass "srun --train-runtime runs through the installed plugin"
else fail "srun through the installed plugin" "$out"; fi
bash "$cluster" stop >/dev/null 2>&1

dpkg --purge "${packages[@]}" >/dev/null 2>&1
left=$(find /etc/systemd/system -name "$unit" -o -name "$tier_unit" 2>/dev/null)
if [[ ! -e $plugin && ! -e $conf && ! -e $unit_file && ! -e $tier_file && ! -e $cache && ! -e ${cache%.cache}.nccl.xml && -z $left ]]; then
  pass "purging the packages removes the plugin, its plugstack line, the boot and mount units and their links, and the topology cache"
else fail "purge" "$(ls -d "$plugin" "$conf" "$unit_file" "$tier_file" "$cache" $left 2>&1)"; fi
if [[ -n $tier_options ]]; then echo "(the tier's tmpfs was mounted before the test: not checked after purge, mounted again)"
elif ! mountpoint -q "$tier"; then pass "purging unmounts the tier's tmpfs the install mounted (no job's file in it)"
else fail "the tier's tmpfs after purge" "$(findmnt "$tier") $(ls -A "$tier")"; fi
echo "deb packages: $passed passed, $failed failed"
exit $((failed > 0))
