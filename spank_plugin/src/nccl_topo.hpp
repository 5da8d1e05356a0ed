#pragma once
// Whether a step exports NCCL_TOPO_FILE (plugstack nccl_topo=auto|always|off), as pure functions of
// what the node says, so every rule is unit-tested without Slurm. NCCL's advice for VMs: hand it a
// topology file holding a PCI tree equivalent to the host's, since a guest's own sysfs shows a flat
// or made-up one. The file is the one `trainrt-topo write-cache` writes (root) beside the cache;
// the plugin never writes one (it runs as the user, in slurmstepd).
#include <string>
#include <string_view>

#include "options.hpp"

namespace trainrt::spank {

// What says "virtual machine" without asking another process:
//   the x86 CPUID hypervisor bit, which Linux shows as "hypervisor" in /proc/cpuinfo's flags line
//   (KVM, Xen HVM, VMware, Hyper-V, Nitro guests; never set on bare metal), else, for CPUs without
//   that flag (ARM), /sys/hypervisor/type (Xen) or a DMI product/vendor naming a hypervisor
//   (/sys/class/dmi/id/{sys_vendor,product_name}: QEMU, KVM, VMware, VirtualBox, Xen, "Virtual
//   Machine" of Hyper-V). A cloud's name alone ("Amazon EC2", "Google Compute Engine") is not a VM:
//   bare-metal instances carry it too.
// `cpuinfo` is the start of /proc/cpuinfo (its first "flags" line is enough).
bool looks_like_vm(std::string_view cpuinfo, std::string_view sys_vendor, std::string_view product_name,
                   std::string_view hypervisor_type);
// Reads those files (the first 16 KiB of /proc/cpuinfo: one CPU's record), a few microseconds.
bool this_node_is_vm();

struct NcclTopoInput {
  NcclTopo mode = NcclTopo::Auto;
  bool is_vm = false;        // only consulted in auto mode
  bool cache_used = false;   // the step's Node came from a fresh digested cache
  std::string path;          // the file beside that cache (topo::nccl_topo_path)
  std::string user_value;    // NCCL_TOPO_FILE from the job's environment, "" when unset
};

struct NcclTopoChoice {
  std::string export_path;  // NCCL_TOPO_FILE for every task; "" = leave it alone
  std::string note;         // why not, or that it was set (logged; printed with show)
};

// off: nothing. A user's own NCCL_TOPO_FILE is never replaced (not even with env=override: it names
// a file NCCL reads as the user, chosen on purpose). auto on bare metal: nothing (NCCL reads sysfs).
// Otherwise the file when the cache was used and the file is good, else a note saying why not.
// `check_file` is called only when the file would be exported, so its cost is paid only then; it
// returns "" when the file is trusted and matches the Node (topo::check_nccl_topo_file), else why not.
template <class CheckFile>
NcclTopoChoice choose_nccl_topo(const NcclTopoInput& in, CheckFile&& check_file);

// The last rule: export `in.path`, or the note naming `file_problem`.
NcclTopoChoice nccl_topo_file_choice(const NcclTopoInput& in, const std::string& file_problem);

template <class CheckFile>
NcclTopoChoice choose_nccl_topo(const NcclTopoInput& in, CheckFile&& check_file) {
  if (in.mode == NcclTopo::Off) return {};
  if (in.mode == NcclTopo::Auto && !in.is_vm) return {};
  if (!in.user_value.empty())
    return {"", "NCCL_TOPO_FILE=" + printable(in.user_value) + " from the job's environment is kept"};
  if (!in.cache_used)
    return {"", "no NCCL_TOPO_FILE: the node's topology did not come from a fresh digested cache "
                "(trainrt-topo write-cache writes both)"};
  return nccl_topo_file_choice(in, check_file());
}

}  // namespace trainrt::spank
