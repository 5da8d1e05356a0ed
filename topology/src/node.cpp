#include <fmt/format.h>

#include <algorithm>
#include <cctype>

#include "node_builder.hpp"
#include "trainrt/error.hpp"
#include "trainrt/number.hpp"
#include "trainrt/strings.hpp"
#include "trainrt/topology/node.hpp"

namespace trainrt::topo {

const NumaNode* Node::numa_by_os(unsigned os_index) const {
  for (const auto& n : numa_nodes)
    if (n.os_index == os_index) return &n;
  return nullptr;
}

const char* to_string(LinkLayer link) {
  switch (link) {
    case LinkLayer::InfiniBand: return "InfiniBand";
    case LinkLayer::Ethernet: return "Ethernet";
    case LinkLayer::Efa: return "EFA";
    case LinkLayer::Unknown: break;
  }
  return "unknown";
}

const char* to_string(PciKind kind) {
  switch (kind) {
    case PciKind::HostBridge: return "host-bridge";
    case PciKind::Bridge: return "bridge";
    case PciKind::Device: break;
  }
  return "device";
}

std::string format_busid(unsigned domain, unsigned bus, unsigned dev, unsigned func) {
  return fmt::format("{:04x}:{:02x}:{:02x}.{:x}", domain, bus, dev, func);
}

std::string normalize_busid(const std::string& text) {
  // [DOMAIN:]BUS:DEVICE.FUNCTION in hexadecimal, each within what PCI allows (Linux's domains are
  // 32 bits: VMD's start at 10000). Anything else is no bus id.
  const std::size_t dot = text.rfind('.');
  if (dot == std::string::npos) return {};
  const auto parts = split(std::string_view(text).substr(0, dot), ':');
  if (parts.size() != 2 && parts.size() != 3) return {};
  const bool has_domain = parts.size() == 3;
  const auto domain = has_domain ? to_number<unsigned>(parts[0], 0, 0xffffffff, 16) : 0u;
  const auto bus = to_number<unsigned>(parts[has_domain ? 1 : 0], 0, 0xff, 16);
  const auto dev = to_number<unsigned>(parts[has_domain ? 2 : 1], 0, 0x1f, 16);
  const auto func = to_number<unsigned>(std::string_view(text).substr(dot + 1), 0, 7, 16);
  if (!domain || !bus || !dev || !func) return {};
  return format_busid(*domain, *bus, *dev, *func);
}

bool is_gpu_pci(std::uint16_t vendor, std::uint16_t class_id) {
  // Display/3D controllers from NVIDIA or AMD; an ASPEED BMC VGA is not a GPU for training.
  return (class_id >> 8) == 0x03 && (vendor == 0x10de || vendor == 0x1002);
}

bool is_network_pci(std::uint16_t class_id) { return (class_id >> 8) == 0x02; }

LinkLayer classify_link(std::uint16_t vendor, std::uint16_t device, std::uint16_t class_id) {
  if (class_id == 0x0207) return LinkLayer::InfiniBand;
  if (vendor == 0x1d0f && (device == 0 || (device & 0xfff0) == 0xefa0)) return LinkLayer::Efa;
  if (class_id == 0x0200) return LinkLayer::Ethernet;
  return LinkLayer::Unknown;
}

Gpu make_gpu(const PciNode& p, int idx, const CpuSet& local_cpus) {
  Gpu g;
  g.busid = p.busid;
  g.vendor = p.vendor;
  g.device = p.device;
  g.pci = idx;
  g.numa = p.numa;
  g.local_cpus = local_cpus;
  return g;
}

Nic make_nic(const PciNode& p, int idx, const CpuSet& local_cpus) {
  Nic n;
  n.busid = p.busid;
  n.vendor = p.vendor;
  n.device = p.device;
  n.class_id = p.class_id;
  n.link = classify_link(p.vendor, p.device, p.class_id);
  n.pci = idx;
  n.numa = p.numa;
  n.local_cpus = local_cpus;
  return n;
}

void check_room(std::size_t have, std::size_t cap, const char* what, const std::string& context) {
  if (have >= cap) throw Error(fmt::format("more than {} {}: beyond what a node model holds", cap, what), context);
}

void finalize_node(Node& node) {
  if (node.gpus.size() > kMaxGpus) check_room(node.gpus.size(), kMaxGpus, "GPUs", node.source);
  if (node.nics.size() > kMaxNics) check_room(node.nics.size(), kMaxNics, "NICs", node.source);
  std::sort(node.numa_nodes.begin(), node.numa_nodes.end(),
            [](const NumaNode& a, const NumaNode& b) { return a.os_index < b.os_index; });
  std::sort(node.packages.begin(), node.packages.end(),
            [](const Package& a, const Package& b) { return a.os_index < b.os_index; });
  std::sort(node.cores.begin(), node.cores.end(),
            [](const Core& a, const Core& b) { return a.pus.first() < b.pus.first(); });
  std::sort(node.gpus.begin(), node.gpus.end(), [](const Gpu& a, const Gpu& b) { return a.busid < b.busid; });
  std::sort(node.nics.begin(), node.nics.end(), [](const Nic& a, const Nic& b) { return a.busid < b.busid; });
  for (unsigned i = 0; i < node.gpus.size(); ++i) node.gpus[i].index = i;
  for (unsigned i = 0; i < node.nics.size(); ++i) node.nics[i].index = i;
  for (auto& core : node.cores) {
    for (const auto& numa : node.numa_nodes)
      if (core.pus.intersects(numa.cpus)) {
        core.numa = static_cast<int>(numa.os_index);
        break;
      }
  }
  if (node.all_cpus.empty())
    for (const auto& core : node.cores) node.all_cpus |= core.pus;
  check_node(node, node.source);
}

}  // namespace trainrt::topo
