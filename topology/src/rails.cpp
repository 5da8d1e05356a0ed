#include "trainrt/topology/rails.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "trainrt/error.hpp"

namespace trainrt::topo {
namespace {

std::vector<int> ancestors(const Node& node, int v) {
  std::vector<int> chain;
  for (; v >= 0; v = node.pci[static_cast<std::size_t>(v)].parent) chain.push_back(v);
  return chain;
}

// A PCIe switch shows up as an upstream bridge with downstream bridges of the same vendor:device
// below it; collapsing such chains makes "one switch" mean one physical switch.
int switch_of(const Node& node, int bridge) {
  int top = bridge;
  for (;;) {
    const PciNode& b = node.pci[static_cast<std::size_t>(top)];
    if (b.parent < 0) return top;
    const PciNode& up = node.pci[static_cast<std::size_t>(b.parent)];
    if (up.kind != PciKind::Bridge || b.vendor == 0 || up.vendor != b.vendor || up.device != b.device) return top;
    top = b.parent;
  }
}

bool share_numa(const std::vector<unsigned>& a, const std::vector<unsigned>& b) {
  for (unsigned x : a)
    if (std::find(b.begin(), b.end(), x) != b.end()) return true;
  return false;
}

// Smaller is nearer. Within SYS, a NIC in the GPU's package beats one across the socket link.
int distance(const Node& node, const Gpu& gpu, const Nic& nic, PathClass cls) {
  int d = static_cast<int>(cls) * 2;
  if (cls == PathClass::SYS) {
    int pg = node.pci[static_cast<std::size_t>(gpu.pci)].package;
    int pn = node.pci[static_cast<std::size_t>(nic.pci)].package;
    if (pg < 0 || pn < 0 || pg != pn) d += 1;
  }
  return d;
}

std::string nic_label(const Nic& n) {
  return n.rdma_name.empty() ? n.busid : fmt::format("{} ({})", n.rdma_name, n.busid);
}

bool matches(const Nic& n, const std::string& key) {
  if (key == n.rdma_name || key == n.busid) return true;
  return std::find(n.netdevs.begin(), n.netdevs.end(), key) != n.netdevs.end();
}

std::vector<bool> eligible_nics(const Node& node, const RailOptions& options, std::vector<std::string>& excluded) {
  std::vector<bool> ok(node.nics.size(), false);
  if (!options.nic_include.empty()) {
    for (const auto& key : options.nic_include) {
      bool found = false;
      for (const auto& n : node.nics)
        if (matches(n, key)) ok[n.index] = found = true;
      if (!found) throw Error(fmt::format("'{}' names no NIC of this node", key), "nic_include");
    }
    for (const auto& n : node.nics)
      if (!ok[n.index]) excluded.push_back(fmt::format("{}: not in nic_include", nic_label(n)));
    return ok;
  }
  bool any_ib = std::any_of(node.nics.begin(), node.nics.end(),
                            [](const Nic& n) { return n.rdma && n.link == LinkLayer::InfiniBand; });
  for (const auto& n : node.nics) {
    if (!n.rdma) {
      excluded.push_back(fmt::format("{}: no RDMA (OpenFabrics) device", nic_label(n)));
    } else if (any_ib && n.link != LinkLayer::InfiniBand) {
      // The usual RoCE/Ethernet mlx5 on an InfiniBand node is the management or storage port.
      excluded.push_back(fmt::format("{}: {} while the node's rails are InfiniBand", nic_label(n), to_string(n.link)));
    } else {
      ok[n.index] = true;
    }
  }
  return ok;
}

}  // namespace

const char* to_string(PathClass path) {
  switch (path) {
    case PathClass::PIX: return "PIX";
    case PathClass::PXB: return "PXB";
    case PathClass::PHB: return "PHB";
    case PathClass::NODE: return "NODE";
    case PathClass::SYS: break;
  }
  return "SYS";
}

PathClass path_class(const Node& node, int a, int b) {
  std::vector<int> up_a = ancestors(node, a);
  std::vector<int> up_b = ancestors(node, b);
  auto common = std::find_first_of(up_a.begin(), up_a.end(), up_b.begin(), up_b.end());
  if (common == up_a.end()) {
    const PciNode& ra = node.pci[static_cast<std::size_t>(up_a.back())];
    const PciNode& rb = node.pci[static_cast<std::size_t>(up_b.back())];
    return share_numa(ra.numa, rb.numa) ? PathClass::NODE : PathClass::SYS;
  }
  const int lca = *common;
  const PciNode& top = node.pci[static_cast<std::size_t>(lca)];
  if (top.kind == PciKind::HostBridge) return PathClass::PHB;
  if (top.kind == PciKind::Device) return PathClass::PIX;
  std::set<int> switches;
  for (const auto* chain : {&up_a, &up_b}) {
    for (std::size_t i = 1; i < chain->size(); ++i) {
      int v = (*chain)[i];
      if (node.pci[static_cast<std::size_t>(v)].kind == PciKind::Bridge) switches.insert(switch_of(node, v));
      if (v == lca) break;
    }
  }
  return switches.size() <= 1 ? PathClass::PIX : PathClass::PXB;
}

RailMap pair_rails(const Node& node, const RailOptions& options) {
  RailMap map;
  std::vector<bool> ok = eligible_nics(node, options, map.excluded);
  map.rail_of_nic.assign(node.nics.size(), -1);
  map.matrix.resize(node.gpus.size());

  // Candidates per GPU: every eligible NIC at the smallest distance.
  std::map<std::vector<unsigned>, std::vector<unsigned>> gpus_by_candidates;
  map.gpus.resize(node.gpus.size());
  for (const auto& gpu : node.gpus) {
    GpuRail& rail = map.gpus[gpu.index];
    rail.gpu = gpu.index;
    int best = -1;
    std::vector<unsigned> candidates;
    for (const auto& nic : node.nics) {
      PathClass cls = path_class(node, gpu.pci, nic.pci);
      map.matrix[gpu.index].push_back(cls);
      if (!ok[nic.index]) continue;
      int d = distance(node, gpu, nic, cls);
      if (best < 0 || d < best) {
        best = d;
        candidates.clear();
        rail.path = cls;
      }
      if (d == best) candidates.push_back(nic.index);
    }
    if (candidates.empty()) {
      rail.note = "no rail NIC on this node";
      continue;
    }
    rail.on_switch = rail.path == PathClass::PIX || rail.path == PathClass::PXB;
    gpus_by_candidates[candidates].push_back(gpu.index);
  }

  // GPUs that see the same nearest NICs share them evenly, in PCI order: k GPUs and m NICs give
  // each GPU m/k NICs when m >= k, else each NIC serves about k/m GPUs.
  for (const auto& [nics, gpus] : gpus_by_candidates) {
    const std::size_t m = nics.size(), k = gpus.size();
    for (std::size_t i = 0; i < k; ++i) {
      GpuRail& rail = map.gpus[gpus[i]];
      if (m >= k) {
        for (std::size_t j = i * m / k; j < (i + 1) * m / k; ++j) rail.nics.push_back(nics[j]);
      } else {
        rail.nics.push_back(nics[i * m / k]);
      }
      if (!rail.on_switch) {
        std::vector<std::string> names;
        for (unsigned n : rail.nics) names.push_back(nic_label(node.nics[n]));
        rail.note = fmt::format("no rail NIC on the PCIe switch of GPU {}; nearest by locality: {} ({})",
                                node.gpus[gpus[i]].busid, fmt::join(names, ", "), to_string(rail.path));
      }
    }
  }

  for (const auto& rail : map.gpus)
    for (unsigned n : rail.nics)
      if (map.rail_of_nic[n] < 0) map.rail_of_nic[n] = static_cast<int>(map.rail_count++);
  for (const auto& nic : node.nics)
    if (ok[nic.index] && map.rail_of_nic[nic.index] < 0) map.rail_of_nic[nic.index] = static_cast<int>(map.rail_count++);
  return map;
}

}  // namespace trainrt::topo
