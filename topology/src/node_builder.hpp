#pragma once
// Helpers both loaders share to turn raw device lists into a consistent Node.
#include <cstddef>
#include <cstdint>
#include <pugixml.hpp>
#include <string>

#include "trainrt/topology/node.hpp"

namespace trainrt::topo {

// Caps on what a node model holds (docs/hostile-inputs.md, "Topology"), checked while a loader
// adds to it: the rail matrix is GPUs x NICs, each PCI node holds its NUMA list, and hwloc
// allocates nbobjs^2 distance values (1024^2 x 8 B = 8 MiB).
inline constexpr std::size_t kMaxGpus = 1024;
inline constexpr std::size_t kMaxNics = 1024;
inline constexpr std::size_t kMaxPciNodes = 16384;
// NUMA os indexes (NCCL numaid, hwloc NUMANode os_index and nodeset bits) are below this: Linux
// has at most 1024 NUMA nodes (CONFIG_NODES_SHIFT <= 10).
inline constexpr unsigned kMaxNumaNodes = 1024;
inline constexpr unsigned long long kMaxDistanceObjects = 1024;
// The deepest PCI chain, host bridge included: a PCI domain has 256 bus numbers and every bridge
// level below a host bridge takes one, so no machine is deeper (the XML loaders stop at 128 levels
// of nesting first). The rail pairing walks chains once per GPU and NIC pair.
inline constexpr unsigned kMaxPciDepth = 257;
// Per NIC: OpenFabrics ports and network interfaces (real NICs have 1 or 2 of each).
inline constexpr std::size_t kMaxPorts = 256;
inline constexpr std::size_t kMaxNetdevs = 256;
// The longest string of a node model: an hwloc attribute (64 KiB, file_checks.hpp) or a path with
// its "hwloc-xml:" prefix.
inline constexpr std::size_t kMaxNodeString = (64u << 10) + 4096 + 64;

// Throws trainrt::Error naming `context` (the file) when `have` already reached `cap` of `what`;
// loaders call it before each push.
void check_room(std::size_t have, std::size_t cap, const char* what, const std::string& context);

// The loaders' second halves, for load_file, which reads and parses a file once and dispatches on
// its root element: `text` is the file's content and `doc` its checked parse (parse_topology_xml).
Node hwloc_from_text(const std::string& text, const pugi::xml_document& doc, const std::string& path);
Node nccl_from_document(const pugi::xml_document& doc, const std::string& path);

std::string format_busid(unsigned domain, unsigned bus, unsigned dev, unsigned func);
// Lower-cases and pads "0:3:0.0"-like text to dddd:bb:dd.f; returns "" when it is not a bus id.
std::string normalize_busid(const std::string& text);

bool is_gpu_pci(std::uint16_t vendor, std::uint16_t class_id);
bool is_network_pci(std::uint16_t class_id);

// The one place a NIC's link layer is decided, for every loader (the copies had drifted,
// so an AWS node was EFA from its NCCL file and "Ethernet" from hwloc). EFA is Amazon's vendor id
// with an EFA device id (0xefa0-0xefaf); ENA (0x1d0f:0xec20) stays Ethernet. An NCCL file that
// omits the device id lists an Amazon NIC only because NCCL uses it, which it does through EFA.
LinkLayer classify_link(std::uint16_t vendor, std::uint16_t device, std::uint16_t class_id);

// A GPU or NIC with what every source knows filled in from its PCI vertex `p` at index `idx`
// (bus id, ids, class, link layer, NUMA); each loader adds what only it knows.
Gpu make_gpu(const PciNode& p, int idx, const CpuSet& local_cpus);
Nic make_nic(const PciNode& p, int idx, const CpuSet& local_cpus);

// Sorts NUMA nodes, cores, GPUs and NICs into their documented orders and numbers GPUs and NICs,
// then check_node()s the result. Throws trainrt::Error naming node.source beyond kMaxGpus or
// kMaxNics, or when the node breaks an invariant.
void finalize_node(Node& node);

// The invariants of every Node a loader makes (node_check.cpp lists them: every CPU in exactly one
// core, every GPU and NIC on its own device vertex of the PCI tree, the tree at most kMaxPciDepth
// deep with bridges above devices, every index naming something that exists, the orders
// finalize_node sorts into, the caps above). The cache decoder holds every Node it reads to them.
// Throws trainrt::Error naming `context` and the first one broken.
void check_node(const Node& node, const std::string& context);

}  // namespace trainrt::topo
