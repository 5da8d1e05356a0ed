// The node as an NCCL topology file (NCCL_TOPO_FILE, <system version="1">): for VMs
// and containers, where NCCL cannot see the host's PCI tree, NCCL's advice is a file holding an
// equivalent one. Only what NCCL uses is written: per NUMA node a <cpu> with its affinity, and
// below it the PCIe subtrees that hold a GPU or an RDMA NIC (switches kept, host bridges folded
// into the <cpu>, as in NCCL's own dumps), NICs with their OpenFabrics name and ports.
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "trainrt/error.hpp"
#include "trainrt/topology/render.hpp"

namespace trainrt::topo {
namespace {

// NCCL's affinity form: comma-separated 32-bit hex words, most significant first.
std::string affinity(const CpuSet& cpus) {
  const int last = cpus.last();
  if (last < 0) return "00000000";
  std::vector<std::uint32_t> words(static_cast<std::size_t>(last) / 32 + 1, 0);
  for (unsigned c : cpus.members()) words[c / 32] |= 1u << (c % 32);
  std::string out;
  for (auto it = words.rbegin(); it != words.rend(); ++it) out += fmt::format("{}{:08x}", out.empty() ? "" : ",", *it);
  return out;
}

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

struct Emitter {
  const Node& node;
  std::vector<char> keep;
  std::vector<std::vector<int>> children;
  std::vector<const Nic*> nic_at;
  std::string out;
  unsigned placeholder = 0;

  // The subtree of `v` at `depth`, with an explicit stack: the tree's depth comes from the node
  // (at most kMaxPciDepth for any Node check_node accepts), not from the thread's stack.
  void pci(int root, int root_depth) {
    struct Todo {
      int v, depth;
      bool close;
    };
    std::vector<Todo> todo{{root, root_depth, false}};
    while (!todo.empty()) {
      const Todo t = todo.back();
      todo.pop_back();
      const std::string indent(static_cast<std::size_t>(2 * t.depth), ' ');
      if (t.close) {
        out += indent + "</pci>\n";
        continue;
      }
      const PciNode& p = node.pci[static_cast<std::size_t>(t.v)];
      // A bridge hwloc recorded without a bus id gets a made-up one in NCCL's own placeholder range.
      const std::string busid = !p.busid.empty() ? p.busid : fmt::format("ffff:ff:{:02x}.0", placeholder++ & 0xff);
      const unsigned cls = p.kind != PciKind::Device && p.class_id == 0 ? 0x0604 : p.class_id;
      out += fmt::format("{}<pci busid=\"{}\" class=\"0x{:04x}00\" vendor=\"0x{:04x}\" device=\"0x{:04x}\"", indent,
                         busid, cls, p.vendor, p.device);
      std::string inner;
      if (const Nic* n = nic_at[static_cast<std::size_t>(t.v)]; n && !n->rdma_name.empty()) {
        inner += indent + "  <nic>\n";
        if (n->ports.empty()) inner += fmt::format("{}    <net name=\"{}\" port=\"1\"/>\n", indent, xml_escape(n->rdma_name));
        for (const auto& port : n->ports)
          inner += fmt::format("{}    <net name=\"{}\" port=\"{}\"/>\n", indent, xml_escape(n->rdma_name), port.number);
        inner += indent + "  </nic>\n";
      }
      const auto& kids = children[static_cast<std::size_t>(t.v)];
      if (inner.empty() && kids.empty()) {
        out += "/>\n";
        continue;
      }
      out += ">\n" + inner;
      todo.push_back({t.v, t.depth, true});
      for (auto it = kids.rbegin(); it != kids.rend(); ++it) todo.push_back({*it, t.depth + 1, false});
    }
  }
};

}  // namespace

std::string render_nccl_topology(const Node& node) {
  if (node.numa_nodes.empty()) throw Error("the node has no NUMA nodes to hang the PCI tree from", node.source);
  Emitter e{node, std::vector<char>(node.pci.size(), 0), std::vector<std::vector<int>>(node.pci.size()),
            std::vector<const Nic*>(node.pci.size(), nullptr), {}, 0};
  // Each vertex is marked once, so marking every device's chain is linear in the tree.
  auto mark = [&](int v) {
    if (v >= static_cast<int>(node.pci.size()))
      throw Error(fmt::format("PCI vertex {} is outside the node's {} vertices", v, node.pci.size()), node.source);
    for (; v >= 0 && !e.keep[static_cast<std::size_t>(v)]; v = node.pci[static_cast<std::size_t>(v)].parent)
      e.keep[static_cast<std::size_t>(v)] = 1;
  };
  for (const auto& g : node.gpus) mark(g.pci);
  for (const auto& n : node.nics)
    if (n.rdma && n.pci >= 0) mark(n.pci), e.nic_at[static_cast<std::size_t>(n.pci)] = &n;
  std::vector<int> roots;
  for (int v = 0; v < static_cast<int>(node.pci.size()); ++v) {
    if (!e.keep[static_cast<std::size_t>(v)]) continue;
    const int parent = node.pci[static_cast<std::size_t>(v)].parent;
    (parent < 0 ? roots : e.children[static_cast<std::size_t>(parent)]).push_back(v);
  }
  auto by_busid = [&](int a, int b) { return node.pci[static_cast<std::size_t>(a)].busid < node.pci[static_cast<std::size_t>(b)].busid; };
  for (auto& kids : e.children) std::stable_sort(kids.begin(), kids.end(), by_busid);

  e.out = fmt::format("<!-- NCCL_TOPO_FILE generated by trainrt-topo from {} -->\n<system version=\"1\">\n",
                      xml_escape(node.source));
  // Each root under its home NUMA node (the first of its list that exists; else the first NUMA
  // node), decided once per root rather than once per root and NUMA node.
  std::map<unsigned, std::vector<int>> roots_of;
  for (int r : roots) {
    const PciNode& p = node.pci[static_cast<std::size_t>(r)];
    const bool known = !p.numa.empty() && node.numa_by_os(p.numa.front());
    roots_of[known ? p.numa.front() : node.numa_nodes.front().os_index].push_back(r);
  }
  for (const auto& numa : node.numa_nodes) {
    e.out += fmt::format("  <cpu numaid=\"{}\" affinity=\"{}\">\n", numa.os_index, affinity(numa.cpus));
    if (auto it = roots_of.find(numa.os_index); it != roots_of.end()) {
      for (int r : it->second) {
        const PciNode& p = node.pci[static_cast<std::size_t>(r)];
        if (p.kind == PciKind::HostBridge)
          for (int c : e.children[static_cast<std::size_t>(r)]) e.pci(c, 2);
        else
          e.pci(r, 2);
      }
    }
    e.out += "  </cpu>\n";
  }
  e.out += "</system>\n";
  return e.out;
}

}  // namespace trainrt::topo
