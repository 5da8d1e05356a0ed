// Reads the NCCL_TOPO_FILE format cloud vendors publish: <system><cpu numaid affinity><pci ...>.
// Such files are partial: no cores, no memory sizes, often no vendor ids or NIC names. What they
// do not say stays empty in the Node rather than being guessed.
#include <fmt/format.h>

#include <pugixml.hpp>
#include <utility>
#include <vector>

#include "file_checks.hpp"
#include "node_builder.hpp"
#include "trainrt/error.hpp"
#include "trainrt/number.hpp"
#include "trainrt/topology/load.hpp"

namespace trainrt::topo {
namespace {

// "0x10de" as NCCL writes it; an absent or empty attribute is 0 (unknown), anything else that is not
// one 32-bit hexadecimal number is an error naming it.
std::uint32_t hex_attr(const pugi::xml_node& n, const char* name, const std::string& path) {
  std::string_view v = n.attribute(name).value();
  if (v.empty()) return 0;
  if (v.starts_with("0x") || v.starts_with("0X")) v.remove_prefix(2);
  return parse_number<std::uint32_t>(v, "a hexadecimal number", 0, ~std::uint32_t{0},
                                     fmt::format("{}: <{}> attribute {}", path, n.name(), name), 16);
}

// NCCL writes the 24-bit class code (0x030200); the model keeps base class and subclass.
std::uint16_t class_of(const pugi::xml_node& pci, const std::string& path) {
  std::uint32_t c = hex_attr(pci, "class", path);
  return static_cast<std::uint16_t>(c > 0xffff ? c >> 8 : c);
}

struct Walker {
  Node& node;
  const std::string& path;
  unsigned numa;
  CpuSet cpus;

  // Adds `top` and every <pci> below it, parents before children, with an explicit stack: the
  // nesting comes from the file (parse_topology_xml caps it at kMaxXmlDepth as well).
  void add_pci_tree(const pugi::xml_node& top, int host_idx) {
    std::vector<std::pair<pugi::xml_node, int>> todo{{top, host_idx}};
    while (!todo.empty()) {
      auto [el, parent] = todo.back();
      todo.pop_back();
      const int idx = add_pci(el, parent);
      // Pushed in reverse so that siblings keep their file order.
      std::vector<pugi::xml_node> children;
      for (auto child : el.children("pci")) children.push_back(child);
      for (auto it = children.rbegin(); it != children.rend(); ++it) todo.emplace_back(*it, idx);
    }
  }

  int add_pci(const pugi::xml_node& el, int parent) {
    PciNode p;
    p.parent = parent;
    p.busid = normalize_busid(el.attribute("busid").value());
    if (p.busid.empty())
      throw Error(fmt::format("<pci> element with bad busid '{}'", std::string(el.attribute("busid").value()).substr(0, 40)),
                  path);
    p.vendor = static_cast<std::uint16_t>(hex_attr(el, "vendor", path));
    p.device = static_cast<std::uint16_t>(hex_attr(el, "device", path));
    p.class_id = class_of(el, path);
    bool has_pci_children = !el.child("pci").empty();
    p.kind = (has_pci_children || p.class_id == 0x0604) ? PciKind::Bridge : PciKind::Device;
    p.numa = {numa};
    check_room(node.pci.size(), kMaxPciNodes, "PCI devices and bridges", path);
    const int idx = static_cast<int>(node.pci.size());
    node.pci.push_back(p);

    if (p.kind == PciKind::Device) {
      bool vendor_ok = p.vendor == 0 || p.vendor == 0xffff || is_gpu_pci(p.vendor, p.class_id);
      if ((p.class_id >> 8) == 0x03 && vendor_ok) {
        check_room(node.gpus.size(), kMaxGpus, "GPUs", path);
        node.gpus.push_back(make_gpu(p, idx, cpus));
      } else if (is_network_pci(p.class_id)) {
        add_nic(el, p, idx);
      }
    }
    return idx;
  }

  void add_nic(const pugi::xml_node& el, const PciNode& p, int idx) {
    check_room(node.nics.size(), kMaxNics, "NICs", path);
    Nic n = make_nic(p, idx, cpus);
    n.rdma = true;  // a vendor lists a NIC in an NCCL topology file because NCCL is to use it
    // NCCL's own dumps name the device and its ports: <nic><net name="mlx5_0" port="1"/></nic>.
    for (auto net : el.child("nic").children("net")) {
      if (n.rdma_name.empty()) n.rdma_name = net.attribute("name").value();
      unsigned port = net.attribute("port").as_uint(1);
      n.ports.push_back({port, -1});
    }
    node.nics.push_back(std::move(n));
  }
};

}  // namespace

Node nccl_from_document(const pugi::xml_document& doc, const std::string& path) {
  pugi::xml_node system = doc.child("system");
  if (!system) throw Error("not an NCCL topology file (no <system> root element)", path);

  Node node;
  node.source = "nccl-xml:" + path;
  node.cores_are_pus = true;
  for (auto cpu : system.children("cpu")) {
    const unsigned numa = parse_number<unsigned>(cpu.attribute("numaid").value(), "a NUMA node number", 0,
                                                 kMaxNumaNodes - 1, fmt::format("{}: <cpu> numaid", path));
    if (node.numa_by_os(numa))
      throw Error(fmt::format("two <cpu> elements claim numaid {}", numa), path);
    CpuSet cpus;
    try {
      cpus = CpuSet::parse_hex_mask(cpu.attribute("affinity").value());
    } catch (const Error& e) {
      throw Error(fmt::format("<cpu numaid=\"{}\"> affinity: {}", numa, e.what()), path);
    }
    // Each PU becomes a core of this NUMA node; one PU in two <cpu> elements would let a file
    // multiply its cores (and the NUMA nodes hold disjoint CPUs on every real machine).
    if (cpus.intersects(node.all_cpus))
      throw Error(fmt::format("<cpu numaid=\"{}\"> affinity {} overlaps another <cpu>'s", numa,
                              (cpus & node.all_cpus).to_list().substr(0, 40)),
                  path);
    node.all_cpus |= cpus;
    NumaNode n;
    n.os_index = numa;
    n.cpus = cpus;
    node.numa_nodes.push_back(n);
    for (unsigned pu : cpus.members()) {
      Core c;
      c.os_index = pu;
      c.pus.set(pu);
      node.cores.push_back(c);
    }
    // Each <cpu> acts as the host bridge of the PCI devices below it.
    PciNode host;
    host.kind = PciKind::HostBridge;
    host.numa = {n.os_index};
    const int host_idx = static_cast<int>(node.pci.size());
    check_room(node.pci.size(), kMaxPciNodes, "PCI devices and bridges", path);
    node.pci.push_back(host);
    Walker w{node, path, n.os_index, cpus};
    for (auto pci : cpu.children("pci")) w.add_pci_tree(pci, host_idx);
  }
  if (node.numa_nodes.empty()) throw Error("the NCCL topology has no <cpu> elements", path);
  finalize_node(node);
  return node;
}

Node load_nccl_xml(const std::string& path) {
  std::string text = read_topology_file(path);
  pugi::xml_document doc;
  parse_topology_xml(text, path, doc);
  return nccl_from_document(doc, path);
}

Node load_file(const std::string& path) {
  // One read and one parse: the type is decided on the same bytes the loader then reads.
  std::string text = read_topology_file(path);
  pugi::xml_document doc;
  parse_topology_xml(text, path, doc);
  if (doc.child("system")) return nccl_from_document(doc, path);
  if (doc.child("topology")) return hwloc_from_text(text, doc, path);
  throw Error("neither an hwloc topology (<topology>) nor an NCCL topology (<system>)", path);
}

}  // namespace trainrt::topo
