// Reads a node from hwloc: the live machine or an hwloc XML file (1.x or 2.x format).
#include <fmt/format.h>
#include <hwloc.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#include "file_checks.hpp"
#include "hwloc_handle.hpp"
#include "node_builder.hpp"
#include "trainrt/error.hpp"
#include "trainrt/number.hpp"
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
  for (hwloc_obj_t o = nullptr; (o = hwloc_get_next_bridge(topo, o));) {
    check_room(objs.size(), kMaxPciNodes, "PCI devices and bridges", node.source);
    objs.push_back(o);
  }
  for (hwloc_obj_t o = nullptr; (o = hwloc_get_next_pcidev(topo, o));) {
    check_room(objs.size(), kMaxPciNodes, "PCI devices and bridges", node.source);
    objs.push_back(o);
  }
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
      check_room(node.gpus.size(), kMaxGpus, "GPUs", node.source);
      Gpu g = make_gpu(node.pci[idx], idx, to_cpuset(cpu_side->cpuset));
      g.model = info(o, "PCIDevice");
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
      check_room(node.nics.size(), kMaxNics, "NICs", node.source);
      Nic n = make_nic(node.pci[idx], idx, to_cpuset(cpu_side->cpuset));
      n.model = info(o, "PCIDevice");
      if (a.linkspeed > 0) n.pcie_gbytes_s = a.linkspeed;
      for (hwloc_obj_t c = o->io_first_child; c; c = c->next_sibling) {
        if (c->type != HWLOC_OBJ_OS_DEVICE || !c->name) continue;
        if (c->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS) {
          n.rdma = true;
          n.rdma_name = c->name;
          for (unsigned port = 1; port <= 16; ++port) {
            std::string state = info(c, fmt::format("Port{}State", port).c_str());
            if (state.empty()) continue;
            // A state that is not a number in the cache's range is unknown (-1), not port state 0.
            n.ports.push_back({port, to_number<int>(state, 0, 1 << 16).value_or(-1)});
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

// hwloc components that talk to other processes or initialise GPU drivers while discovering: gl
// connects to every X11 display :0.0-:9.9 (a silent listener on a shared node's /tmp/.X11-unix
// hangs discovery forever), opencl loads and initialises every ICD, the others initialise vendor
// drivers. PCI devices and OS devices (OpenFabrics, network) come from sysfs through the linux and
// pci components, which stay.
constexpr const char* kBlacklisted[] = {"gl", "opencl", "cuda", "nvml", "rsmi", "levelzero"};
// Live discovery must read this machine: no file or synthetic description instead.
constexpr const char* kBlacklistedLive[] = {"xml", "synthetic"};

void blacklist(hwloc_topology_t topo, const char* name) {
  // -1/EINVAL means the component is not registered (not built or its plugin is absent), so it
  // cannot run either. hwloc checks this blacklist before components HWLOC_COMPONENTS names too.
  (void)hwloc_topology_set_components(topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, name);
}

HwlocTopology make_topology(const std::string& what, bool live) {
  HwlocTopology topo;
  if (!topo) throw Error("hwloc_topology_init failed", what);
  // Without KEEP_ALL hwloc drops PCI and OS devices, even when an XML file records them.
  hwloc_topology_set_io_types_filter(topo.get(), HWLOC_TYPE_FILTER_KEEP_ALL);
  for (const char* name : kBlacklisted) blacklist(topo.get(), name);
  if (live)
    for (const char* name : kBlacklistedLive) blacklist(topo.get(), name);
  return topo;
}

// hwloc_topology_load() replaces live discovery with a file or a synthetic description when one of
// these is set, without asking the blacklist; the linux and x86 components read HWLOC_FSROOT and
// HWLOC_CPUID_PATH themselves even when HWLOC_COMPONENTS is set. Refuse rather than silently read
// another source.
void refuse_redirecting_environment() {
  for (const char* var : {"HWLOC_XMLFILE", "HWLOC_SYNTHETIC", "HWLOC_FSROOT", "HWLOC_CPUID_PATH"}) {
    const char* v = std::getenv(var);
    if (v && *v)
      throw Error(fmt::format("{} is set, so hwloc would read it instead of this machine; unset it, or pass "
                              "the file as a topology file (trainrt-topo show --xml, plugstack topology_xml=)",
                              var),
                  "live topology");
  }
}

// Attributes hwloc parses into bitmaps (their width sizes hwloc's allocations and ours): the most
// 32-bit words each may have, or 0 for other attributes.
std::size_t bitmap_word_cap(const char* name) {
  for (const char* b : {"cpuset", "complete_cpuset", "online_cpuset", "allowed_cpuset"})
    if (std::strcmp(name, b) == 0) return CpuSet::kMaxMaskWords;
  for (const char* b : {"nodeset", "complete_nodeset", "allowed_nodeset"})
    if (std::strcmp(name, b) == 0) return kMaxNumaNodes / 32;
  return 0;
}

// Before hwloc sees the text: hwloc's import recurses per nesting level, allocates nbobjs^2
// distance matrices and bitmaps as wide as a cpuset attribute, all sized by the file.
void check_hwloc_document(const pugi::xml_document& doc, const std::string& path) {
  if (!doc.child("topology")) throw Error("not an hwloc topology file (no <topology> root element)", path);
  for_each_element(doc, [&](const pugi::xml_node& el, unsigned) {
    const bool object = std::strcmp(el.name(), "object") == 0;
    const char* type = el.attribute("type").value();
    // PU and NUMA os indexes become bitmap bits in hwloc (v1 imports build nodesets from them).
    const unsigned index_cap = !object                              ? 0
                               : std::strcmp(type, "PU") == 0       ? CpuSet::kMaxCpus
                               : std::strcmp(type, "NUMANode") == 0 ? kMaxNumaNodes
                                                                    : 0;
    for (auto a : el.attributes()) {
      if (std::size_t cap = bitmap_word_cap(a.name())) {
        const char* v = a.value();
        const std::size_t words = 1 + static_cast<std::size_t>(std::count(v, v + std::strlen(v), ','));
        if (words > cap)
          throw Error(fmt::format("{} is {} words wide, more than the {} that hold {} indexes", a.name(), words, cap,
                                  cap * 32),
                      path);
      } else if (std::strcmp(a.name(), "nbobjs") == 0) {
        // hwloc would read "-1" with strtoul, as the largest value: only plain digits pass.
        if (!to_number<unsigned long long>(a.value(), 0, kMaxDistanceObjects))
          throw Error(fmt::format("<{}> nbobjs must be a number of at most {}", el.name(), kMaxDistanceObjects), path);
      } else if (index_cap && std::strcmp(a.name(), "os_index") == 0) {
        if (!to_number<unsigned long long>(a.value(), 0, index_cap - 1))
          throw Error(fmt::format("{} os_index must be a number below {}", type, index_cap), path);
      }
    }
  });
}

}  // namespace

Node load_live() {
  refuse_redirecting_environment();
  HwlocTopology topo = make_topology("live topology", true);
  if (hwloc_topology_load(topo.get()) != 0)
    throw Error(fmt::format("hwloc could not discover this machine: {}", std::strerror(errno)), "live topology");
  Node node;
  try {
    node = read_topology(topo.get(), "live");
  } catch (const Error& e) {
    throw Error(e.what(), "live topology");
  }
  // HWLOC_COMPONENTS=stop or -linux (the caller's own environment) can leave hwloc nothing to read.
  if (node.cores.empty()) throw Error("hwloc found no processors on this machine", "live topology");
  return node;
}

Node hwloc_from_text(const std::string& text, const pugi::xml_document& doc, const std::string& path) {
  check_hwloc_document(doc, path);
  HwlocTopology topo = make_topology(path, false);
  // The bytes already checked, not the path again: the file cannot change in between.
  if (hwloc_topology_set_xmlbuffer(topo.get(), text.data(), static_cast<int>(text.size())) != 0)
    throw Error(fmt::format("hwloc refused the XML file: {}", std::strerror(errno)), path);
  if (hwloc_topology_load(topo.get()) != 0)
    throw Error("not a valid hwloc XML topology (hwloc could not parse it)", path);
  Node node;
  try {
    node = read_topology(topo.get(), "hwloc-xml:" + path);
  } catch (const Error& e) {
    throw Error(e.what(), path);
  }
  if (node.cores.empty()) throw Error("the hwloc XML describes no processors", path);
  return node;
}

Node load_hwloc_xml(const std::string& path) {
  std::string text = read_topology_file(path);
  pugi::xml_document doc;
  parse_topology_xml(text, path, doc);
  return hwloc_from_text(text, doc, path);
}

}  // namespace trainrt::topo
