#include "trainrt/topology/rails.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bitset>
#include <map>

#include "node_builder.hpp"
#include "trainrt/error.hpp"

namespace trainrt::topo {
namespace {

// Path classes between PCI vertices, each vertex's chain to its root walked once and kept: the rail
// pairing asks for every GPU and NIC pair, so a per-pair walk (and the old per-bridge climb to its
// switch, quadratic in depth) would multiply by the chains' depth.
class PathClassifier {
 public:
  explicit PathClassifier(const Node& node) : node_(node), memo_(node.pci.size()) {}

  PathClass classify(int a, int b) {
    const Chain& ca = chain(a);
    const Chain& cb = chain(b);
    const std::vector<int>&up_a = ca.up, &up_b = cb.up;
    // The lowest common ancestor: both chains end at their roots, so walk them together from there.
    std::size_t ia = up_a.size(), ib = up_b.size();
    while (ia > 0 && ib > 0 && up_a[ia - 1] == up_b[ib - 1]) --ia, --ib;
    if (ia == up_a.size()) return (ca.root_numa & cb.root_numa).any() ? PathClass::NODE : PathClass::SYS;
    const PciNode& top = node_.pci[static_cast<std::size_t>(up_a[ia])];
    if (top.kind == PciKind::HostBridge) return PathClass::PHB;
    if (top.kind == PciKind::Device) return PathClass::PIX;
    // The switches crossed on the way up to the common ancestor (it included), each run once.
    int first = -1;
    for (const auto& [c, lca] : {std::pair(&ca, ia), std::pair(&cb, ib)}) {
      for (std::size_t i = 1; i <= lca; ++i) {
        if (node_.pci[static_cast<std::size_t>(c->up[i])].kind != PciKind::Bridge) continue;
        if (first < 0) first = c->sw[i];
        else if (c->sw[i] != first) return PathClass::PXB;
      }
    }
    return PathClass::PIX;
  }

 private:
  struct Chain {
    bool done = false;
    std::vector<int> up;  // the vertex, then its ancestors up to the root
    std::vector<int> sw;  // per position: the switch (top bridge of its run) it belongs to
    std::bitset<kMaxNumaNodes> root_numa;
  };

  const Chain& chain(int v) {
    if (v < 0 || v >= static_cast<int>(node_.pci.size()))
      throw Error(fmt::format("PCI vertex {} is outside the node's {} vertices", v, node_.pci.size()), node_.source);
    Chain& c = memo_[static_cast<std::size_t>(v)];
    if (c.done) return c;
    // Parents come before children (check_node), so the walk ends; still, a chain longer than any
    // loader makes is refused rather than walked.
    for (int u = v; u >= 0; u = node_.pci[static_cast<std::size_t>(u)].parent) {
      if (c.up.size() >= kMaxPciDepth || u >= static_cast<int>(node_.pci.size()))
        throw Error(fmt::format("a PCI chain deeper than {} or broken", kMaxPciDepth), node_.source);
      c.up.push_back(u);
    }
    // One PCIe switch shows up as an upstream bridge with downstream bridges of the same
    // vendor:device below it: such a run is one switch, named by its top bridge. From the root
    // down, so each position is decided once.
    c.sw.assign(c.up.size(), -1);
    for (std::size_t i = c.up.size(); i-- > 0;) {
      const PciNode& b = node_.pci[static_cast<std::size_t>(c.up[i])];
      const bool run = i + 1 < c.up.size() && b.vendor != 0 && [&] {
        const PciNode& up = node_.pci[static_cast<std::size_t>(c.up[i + 1])];
        return up.kind == PciKind::Bridge && up.vendor == b.vendor && up.device == b.device;
      }();
      c.sw[i] = run ? c.sw[i + 1] : c.up[i];
    }
    for (unsigned m : node_.pci[static_cast<std::size_t>(c.up.back())].numa)
      if (m < kMaxNumaNodes) c.root_numa.set(m);
    c.done = true;
    return c;
  }

  const Node& node_;
  std::vector<Chain> memo_;
};

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

PathClass path_class(const Node& node, int a, int b) { return PathClassifier(node).classify(a, b); }

RailMap pair_rails(const Node& node, const RailOptions& options) {
  RailMap map;
  std::vector<bool> ok = eligible_nics(node, options, map.excluded);
  map.rail_of_nic.assign(node.nics.size(), -1);
  map.matrix.resize(node.gpus.size());

  // Candidates per GPU: every eligible NIC at the smallest distance.
  std::map<std::vector<unsigned>, std::vector<unsigned>> gpus_by_candidates;
  map.gpus.resize(node.gpus.size());
  PathClassifier paths(node);
  for (const auto& gpu : node.gpus) {
    GpuRail& rail = map.gpus[gpu.index];
    rail.gpu = gpu.index;
    int best = -1;
    std::vector<unsigned> candidates;
    for (const auto& nic : node.nics) {
      PathClass cls = paths.classify(gpu.pci, nic.pci);
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
