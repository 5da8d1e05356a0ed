// Reads a node from hwloc: the live machine or an hwloc XML file (1.x or 2.x format).
#include <fmt/format.h>
#include <hwloc.h>

#include <cstring>
#include <map>
#include <string>

#include "file_checks.hpp"
#include "hwloc_handle.hpp"
#include "node_builder.hpp"
#include "trainrt/error.hpp"
#include "trainrt/topology/load.hpp"

namespace trainrt::topo {
namespace {

CpuSet to_cpuset(hwloc_const_bitmap_t bitmap) {
  CpuSet s;
  if (!bitmap || hwloc_bitmap_iszero(bitmap)) return s;
  // An infinite bitmap (hwloc's "everything") has no place in a node model.
  if (hwloc_bitmap_weight(bitmap) < 0) return s;
  unsigned id;
  hwloc_bitmap_foreach_begin(id, bitmap) { s.set(id); }
  hwloc_bitmap_foreach_end();
  return s;
}

std::vector<unsigned> to_index_list(hwloc_const_bitmap_t bitmap) {
  auto m = to_cpuset(bitmap).members();
  return {m.begin(), m.end()};
}

std::string info(hwloc_obj_t obj, const char* name) {
  const char* v = hwloc_obj_get_info_by_name(obj, name);
  return v ? v : "";
}

int package_of(hwloc_obj_t obj) {
  hwloc_obj_t pkg = hwloc_get_ancestor_obj_by_type(nullptr, HWLOC_OBJ_PACKAGE, obj);
  return pkg ? static_cast<int>(pkg->os_index) : -1;
}

std::string busid_of(hwloc_obj_t obj) {
  const auto& p = obj->attr->pcidev;
  return format_busid(p.domain, p.bus, p.dev, p.func);
}

void read_cpu_side(hwloc_topology_t topo, Node& node) {
  hwloc_obj_t root = hwloc_get_root_obj(topo);
  node.hostname = info(root, "HostName");
  node.all_cpus = to_cpuset(hwloc_topology_get_topology_cpuset(topo));

  for (hwloc_obj_t o = nullptr; (o = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_PACKAGE, o));)
    node.packages.push_back({o->os_index, to_cpuset(o->cpuset)});

  for (hwloc_obj_t o = nullptr; (o = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, o));) {
    NumaNode n;
    n.os_index = o->os_index;
    n.cpus = to_cpuset(o->cpuset);
    n.memory_bytes = o->attr ? o->attr->numanode.local_memory : 0;
    n.package = package_of(o);
    node.numa_nodes.push_back(std::move(n));
  }

  hwloc_obj_type_t core_type = HWLOC_OBJ_CORE;
  if (hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE) <= 0) {
    core_type = HWLOC_OBJ_PU;
    node.cores_are_pus = true;
  }
  for (hwloc_obj_t o = nullptr; (o = hwloc_get_next_obj_by_type(topo, core_type, o));) {
    Core c;
    c.os_index = o->os_index;
    c.pus = to_cpuset(o->cpuset);
    c.package = package_of(o);
    if (!c.pus.empty()) node.cores.push_back(std::move(c));
  }
}

void read_pci_side(hwloc_topology_t topo, Node& node) {
  std::map<hwloc_obj_t, int> index_of;
  std::vector<hwloc_obj_t> objs;
  for (hwloc_obj_t o = nullptr; (o = hwloc_get_next_bridge(topo, o));) objs.push_back(o);
  for (hwloc_obj_t o = nullptr; (o = hwloc_get_next_pcidev(topo, o));) objs.push_back(o);
  for (hwloc_obj_t o : objs) index_of[o] = static_cast<int>(index_of.size());
  node.pci.resize(objs.size());

  for (hwloc_obj_t o : objs) {
    PciNode& p = node.pci[index_of[o]];
    auto parent = index_of.find(o->parent);
    p.parent = parent == index_of.end() ? -1 : parent->second;
    if (o->type == HWLOC_OBJ_BRIDGE) {
      p.kind = o->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST ? PciKind::HostBridge : PciKind::Bridge;
    } else {
      p.kind = PciKind::Device;
    }
    bool has_pci_attr = o->type == HWLOC_OBJ_PCI_DEVICE ||
                        (o->type == HWLOC_OBJ_BRIDGE && o->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_PCI);
    if (has_pci_attr) {
      const auto& a = o->attr->pcidev;
      p.busid = busid_of(o);
      p.vendor = a.vendor_id;
      p.device = a.device_id;
      p.class_id = a.class_id;
    }
    hwloc_obj_t cpu_side = hwloc_get_non_io_ancestor_obj(topo, o);
    p.numa = to_index_list(cpu_side->nodeset);
    p.package = package_of(cpu_side);
  }

  for (hwloc_obj_t o : objs) {
    if (o->type != HWLOC_OBJ_PCI_DEVICE) continue;
    const auto& a = o->attr->pcidev;
    const int idx = index_of[o];
    hwloc_obj_t cpu_side = hwloc_get_non_io_ancestor_obj(topo, o);
    if (is_gpu_pci(a.vendor_id, a.class_id)) {
      Gpu g;
      g.busid = busid_of(o);
      g.vendor = a.vendor_id;
      g.device = a.device_id;
      g.model = info(o, "PCIDevice");
      g.pci = idx;
      g.numa = node.pci[idx].numa;
      g.local_cpus = to_cpuset(cpu_side->cpuset);
      for (hwloc_obj_t c = o->io_first_child; c; c = c->next_sibling) {
        if (c->type != HWLOC_OBJ_OS_DEVICE || !c->name) continue;
        std::string name = c->name;
        if (name.starts_with("cuda")) g.cuda_name = name;
        if (name.starts_with("nvml")) g.nvml_name = name;
        if (auto m = info(c, "GPUModel"); !m.empty()) g.model = m;
        if (auto u = info(c, "NVIDIAUUID"); !u.empty()) g.uuid = u;
      }
      node.gpus.push_back(std::move(g));
    } else if (is_network_pci(a.class_id)) {
      Nic n;
      n.busid = busid_of(o);
      n.vendor = a.vendor_id;
      n.device = a.device_id;
      n.class_id = a.class_id;
      n.model = info(o, "PCIDevice");
      n.pci = idx;
      n.numa = node.pci[idx].numa;
      n.local_cpus = to_cpuset(cpu_side->cpuset);
      if (a.linkspeed > 0) n.pcie_gbytes_s = a.linkspeed;
      n.link = a.class_id == 0x0207 ? LinkLayer::InfiniBand
               : a.class_id == 0x0200 ? LinkLayer::Ethernet
                                      : LinkLayer::Unknown;
      for (hwloc_obj_t c = o->io_first_child; c; c = c->next_sibling) {
        if (c->type != HWLOC_OBJ_OS_DEVICE || !c->name) continue;
        if (c->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS) {
          n.rdma = true;
          n.rdma_name = c->name;
          for (unsigned port = 1; port <= 16; ++port) {
            std::string state = info(c, fmt::format("Port{}State", port).c_str());
            if (state.empty()) continue;
            n.ports.push_back({port, std::atoi(state.c_str())});
          }
        } else if (c->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK) {
          n.netdevs.emplace_back(c->name);
        }
      }
      node.nics.push_back(std::move(n));
    }
  }
}

Node read_topology(hwloc_topology_t topo, std::string source) {
  Node node;
  node.source = std::move(source);
  read_cpu_side(topo, node);
  read_pci_side(topo, node);
  finalize_node(node);
  return node;
}

HwlocTopology make_topology(const std::string& what) {
  HwlocTopology topo;
  if (!topo) throw Error("hwloc_topology_init failed", what);
  // Without KEEP_ALL hwloc drops PCI and OS devices, even when an XML file records them.
  hwloc_topology_set_io_types_filter(topo.get(), HWLOC_TYPE_FILTER_KEEP_ALL);
  return topo;
}

}  // namespace

Node load_live() {
  HwlocTopology topo = make_topology("live topology");
  if (hwloc_topology_load(topo.get()) != 0)
    throw Error(fmt::format("hwloc could not discover this machine: {}", std::strerror(errno)), "live topology");
  return read_topology(topo.get(), "live");
}

Node load_hwloc_xml(const std::string& path) {
  require_readable_file(path);
  HwlocTopology topo = make_topology(path);
  if (hwloc_topology_set_xml(topo.get(), path.c_str()) != 0)
    throw Error(fmt::format("hwloc refused the XML file: {}", std::strerror(errno)), path);
  if (hwloc_topology_load(topo.get()) != 0)
    throw Error("not a valid hwloc XML topology (hwloc could not parse it)", path);
  Node node = read_topology(topo.get(), "hwloc-xml:" + path);
  if (node.cores.empty()) throw Error("the hwloc XML describes no processors", path);
  return node;
}

}  // namespace trainrt::topo
