// The invariants every loader's Node holds, checked in one place: at the end of finalize_node (so a
// loader that breaks one fails loudly) and on every Node the cache decoder reads (so a forged cache
// with a valid checksum can describe nothing the loaders could not). Placement, the rail pairing and
// the renderings rely on them: none indexes an empty list or walks a PCI chain deeper than
// kMaxPciDepth. Each check is linear in the Node (a CpuSet operation costs at most 256 words).
#include <fmt/format.h>

#include <vector>

#include "node_builder.hpp"
#include "trainrt/error.hpp"

namespace trainrt::topo {
namespace {

struct Check {
  const Node& n;
  const std::string& context;

  [[noreturn]] void fail(const std::string& what) const {
    throw Error(fmt::format("impossible node: {}", what), context);
  }
  bool has_package(int os) const {
    if (os == -1) return true;
    for (const auto& p : n.packages)
      if (static_cast<int>(p.os_index) == os) return true;
    return false;
  }
  void numa_list(const std::vector<unsigned>& v, const std::string& who) const {
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (i > 0 && v[i] <= v[i - 1]) fail(fmt::format("{}: NUMA list not ascending", who));
      if (!n.numa_by_os(v[i])) fail(fmt::format("{}: NUMA node {} does not exist", who, v[i]));
    }
  }

  void cpus() const {
    CpuSet seen;
    int prev_first = -1;
    for (std::size_t i = 0; i < n.cores.size(); ++i) {
      const Core& c = n.cores[i];
      if (c.pus.empty()) fail(fmt::format("core {} has no PU", i));
      if (n.cores_are_pus && c.pus.count() != 1) fail(fmt::format("core {} has {} PUs in a node of single-PU cores", i, c.pus.count()));
      if (c.pus.intersects(seen)) fail(fmt::format("core {} shares PUs {} with another core", i, (c.pus & seen).to_list()));
      if (c.pus.first() <= prev_first) fail(fmt::format("core {} is out of order", i));
      prev_first = c.pus.first();
      seen |= c.pus;
      // finalize_node's rule: the first NUMA node (by os index) holding one of its PUs.
      int numa = -1;
      for (const auto& m : n.numa_nodes)
        if (c.pus.intersects(m.cpus)) {
          numa = static_cast<int>(m.os_index);
          break;
        }
      if (c.numa != numa) fail(fmt::format("core {} says NUMA {}, its PUs say {}", i, c.numa, numa));
      if (!has_package(c.package)) fail(fmt::format("core {}: package {} does not exist", i, c.package));
    }
    // Every CPU of the node is in exactly one core: placement splits cores and finds one for each.
    if (!(seen == n.all_cpus))
      fail(fmt::format("the node's CPUs {} are not its cores' PUs {}", n.all_cpus.empty() ? "(none)" : n.all_cpus.to_list().substr(0, 64),
                       seen.empty() ? "(none)" : seen.to_list().substr(0, 64)));
    for (std::size_t i = 0; i < n.numa_nodes.size(); ++i) {
      const NumaNode& m = n.numa_nodes[i];
      if (i > 0 && m.os_index <= n.numa_nodes[i - 1].os_index) fail("NUMA nodes not in ascending os index order");
      if (!m.cpus.is_subset_of(n.all_cpus)) fail(fmt::format("NUMA node {} holds CPUs the node does not have", m.os_index));
      if (!has_package(m.package)) fail(fmt::format("NUMA node {}: package {} does not exist", m.os_index, m.package));
    }
    for (std::size_t i = 0; i < n.packages.size(); ++i) {
      if (i > 0 && n.packages[i].os_index < n.packages[i - 1].os_index) fail("packages not in ascending os index order");
      if (!n.packages[i].cpus.is_subset_of(n.all_cpus)) fail(fmt::format("package {} holds CPUs the node does not have", i));
    }
  }

  void pci() const {
    std::vector<unsigned> depth(n.pci.size(), 1);
    for (std::size_t i = 0; i < n.pci.size(); ++i) {
      const PciNode& p = n.pci[i];
      const std::string who = fmt::format("PCI vertex {}", i);
      if (p.parent >= static_cast<int>(i)) fail(fmt::format("{}: its parent comes after it", who));
      if (p.parent >= 0) {
        const PciNode& up = n.pci[static_cast<std::size_t>(p.parent)];
        if (up.kind == PciKind::Device) fail(fmt::format("{}: its parent is a device, not a bridge", who));
        if (p.kind == PciKind::HostBridge) fail(fmt::format("{}: a host bridge below another vertex", who));
        depth[i] = depth[static_cast<std::size_t>(p.parent)] + 1;
        if (depth[i] > kMaxPciDepth) fail(fmt::format("{}: PCI tree deeper than {}", who, kMaxPciDepth));
      }
      if (p.kind == PciKind::HostBridge ? !p.busid.empty() : normalize_busid(p.busid) != p.busid || p.busid.empty())
        fail(fmt::format("{}: bus id '{}' for a {}", who, p.busid.substr(0, 40), to_string(p.kind)));
      numa_list(p.numa, who);
      if (!has_package(p.package)) fail(fmt::format("{}: package {} does not exist", who, p.package));
    }
  }

  // A GPU or NIC: a device vertex of the tree that says the same as the device does.
  template <typename D>
  void device(const D& d, const char* kind, std::size_t i, std::vector<char>& taken) const {
    const std::string who = fmt::format("{} {}", kind, i);
    if (d.pci < 0 || d.pci >= static_cast<int>(n.pci.size())) fail(fmt::format("{}: outside the PCI tree", who));
    const PciNode& p = n.pci[static_cast<std::size_t>(d.pci)];
    if (p.kind != PciKind::Device) fail(fmt::format("{}: its PCI vertex is a {}", who, to_string(p.kind)));
    if (taken[static_cast<std::size_t>(d.pci)]++) fail(fmt::format("{}: its PCI vertex holds another device", who));
    if (d.busid != p.busid || d.vendor != p.vendor || d.device != p.device || d.numa != p.numa)
      fail(fmt::format("{}: bus id, ids or NUMA differ from its PCI vertex's", who));
    if (!d.local_cpus.is_subset_of(n.all_cpus)) fail(fmt::format("{}: local CPUs the node does not have", who));
  }

  void text(const std::string& s, const char* what) const {
    if (s.size() > kMaxNodeString) fail(fmt::format("{} of {} bytes, more than {}", what, s.size(), kMaxNodeString));
  }

  void devices() const {
    text(n.hostname, "a host name");
    text(n.source, "a source");
    std::vector<char> taken(n.pci.size(), 0);
    for (std::size_t i = 0; i < n.gpus.size(); ++i) {
      const Gpu& g = n.gpus[i];
      device(g, "GPU", i, taken);
      if ((n.pci[static_cast<std::size_t>(g.pci)].class_id >> 8) != 0x03) fail(fmt::format("GPU {}: not a display controller", i));
      if (i > 0 && g.busid < n.gpus[i - 1].busid) fail("GPUs not in PCI bus order");
      for (const auto* t : {&g.model, &g.cuda_name, &g.nvml_name, &g.uuid}) text(*t, "a GPU name");
    }
    for (std::size_t i = 0; i < n.nics.size(); ++i) {
      const Nic& c = n.nics[i];
      device(c, "NIC", i, taken);
      if (c.class_id != n.pci[static_cast<std::size_t>(c.pci)].class_id || !is_network_pci(c.class_id))
        fail(fmt::format("NIC {}: not a network controller", i));
      if (c.link != classify_link(c.vendor, c.device, c.class_id)) fail(fmt::format("NIC {}: link layer not its ids'", i));
      if (!c.rdma && (!c.rdma_name.empty() || !c.ports.empty())) fail(fmt::format("NIC {}: RDMA ports without RDMA", i));
      if (i > 0 && c.busid < n.nics[i - 1].busid) fail("NICs not in PCI bus order");
      if (c.ports.size() > kMaxPorts || c.netdevs.size() > kMaxNetdevs)
        fail(fmt::format("NIC {}: {} ports and {} network interfaces, more than {} of either", i, c.ports.size(),
                         c.netdevs.size(), kMaxPorts));
      for (const auto& port : c.ports)
        if (port.number > 0xffff || port.state < -1 || port.state > 0xffff) fail(fmt::format("NIC {}: port {} state {}", i, port.number, port.state));
      text(c.model, "a NIC model");
      text(c.rdma_name, "an RDMA device name");
      for (const auto& d : c.netdevs) text(d, "a network interface name");
    }
  }
};

}  // namespace

void check_node(const Node& node, const std::string& context) {
  const Check c{node, context};
  c.cpus();
  c.pci();
  c.devices();
}

}  // namespace trainrt::topo
