#include "nccl_topo.hpp"

#include <fmt/format.h>

#include "trainrt/small_file.hpp"
#include "trainrt/strings.hpp"

namespace trainrt::spank {
namespace {

bool contains(std::string_view hay, std::string_view needle) { return hay.find(needle) != std::string_view::npos; }

// At most `max` bytes of a procfs/sysfs file, "" when it cannot be read. The DMI entries are links.
std::string read_start(const char* path, std::size_t max) {
  return read_small_file(path, max, LastLink::follow).value_or(std::string());
}

}  // namespace

bool looks_like_vm(std::string_view cpuinfo, std::string_view sys_vendor, std::string_view product_name,
                   std::string_view hypervisor_type) {
  // The first "flags" line (x86): "flags\t\t: fpu vme ... hypervisor ...".
  for (std::string_view line : split(cpuinfo, '\n')) {
    if (!line.starts_with("flags")) continue;
    std::size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    for (std::string_view word : split(line.substr(colon + 1), ' '))
      if (word == "hypervisor") return true;
    break;
  }
  auto trimmed = [](std::string_view s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
    return s;
  };
  if (!trimmed(hypervisor_type).empty()) return true;
  const std::string_view vendor = trimmed(sys_vendor), product = trimmed(product_name);
  for (std::string_view v : {"QEMU", "Xen", "VMware, Inc.", "innotek GmbH", "Parallels"})
    if (vendor == v) return true;
  for (std::string_view p : {"KVM", "QEMU", "VMware", "VirtualBox", "Virtual Machine", "HVM domU"})
    if (contains(product, p)) return true;
  return false;
}

bool this_node_is_vm() {
  return looks_like_vm(read_start("/proc/cpuinfo", 16 << 10), read_start("/sys/class/dmi/id/sys_vendor", 256),
                       read_start("/sys/class/dmi/id/product_name", 256), read_start("/sys/hypervisor/type", 64));
}

NcclTopoChoice nccl_topo_file_choice(const NcclTopoInput& in, const std::string& file_problem) {
  if (!file_problem.empty()) return {"", fmt::format("no NCCL_TOPO_FILE: {}", printable(file_problem))};
  return {in.path, fmt::format("NCCL_TOPO_FILE={} ({})", printable(in.path),
                               in.mode == NcclTopo::Always ? "nccl_topo=always" : "a virtual machine, nccl_topo=auto")};
}

}  // namespace trainrt::spank
