#pragma once
// GPU -> NIC pairing from the PCIe tree. A rail is a NIC (or set of NICs) that a GPU reaches
// without crossing the CPU; rail ids follow GPU PCI order, so identical boxes whose NICs are named
// differently get the same rails.
#include <map>
#include <string>
#include <vector>

#include "trainrt/topology/node.hpp"

namespace trainrt::topo {

// NCCL's path classes, nearest first. PIX: one PCIe switch; PXB: several switches without the
// host bridge; PHB: through the host bridge; NODE: between host bridges of one NUMA node;
// SYS: across NUMA nodes.
enum class PathClass { PIX, PXB, PHB, NODE, SYS };
const char* to_string(PathClass path);

// Class of the path between two PCI vertices of `node` (indexes into node.pci).
PathClass path_class(const Node& node, int pci_a, int pci_b);

struct RailOptions {
  // When non-empty, exactly these NICs (OpenFabrics name, netdev name or PCI bus id) are rail
  // candidates, whatever their type. An entry that matches no NIC is an error.
  std::vector<std::string> nic_include;
};

struct GpuRail {
  unsigned gpu = 0;
  std::vector<unsigned> nics;  // indexes into Node::nics, PCI order
  PathClass path = PathClass::SYS;
  bool on_switch = false;      // true when the NICs share a PCIe switch with the GPU (PIX/PXB)
  std::string note;            // why the pairing is not local, when it is not
};

struct RailMap {
  std::vector<GpuRail> gpus;                    // one per GPU, PCI order
  std::vector<int> rail_of_nic;                 // per Node::nics index; -1 when not a rail
  std::vector<std::vector<PathClass>> matrix;   // [gpu][nic]
  std::vector<std::string> excluded;            // NICs that are not rails, with the reason
  unsigned rail_count = 0;
};

RailMap pair_rails(const Node& node, const RailOptions& options = {});

// What the live system shows about a rail's network beyond the Node (the cross-node
// check): read from sysfs/procfs, never through a socket, and only for a node loaded live.
struct RailExtras {
  // "mlx5_0/1" -> the subnet prefix of port 1: the first 64 bits of its GID 0
  // (/sys/class/infiniband/mlx5_0/ports/1/gids/0), e.g. "fe80:0000:0000:0000".
  std::map<std::string, std::string> port_prefix;
  // netdev -> its networks, e.g. "10.1.0.0/16,fd00:1:0:0:0:0:0:0/64": IPv4 connected routes
  // (/proc/net/route) and global IPv6 prefixes (/proc/net/if_inet6). For Ethernet (RoCE) rails.
  std::map<std::string, std::string> netdev_networks;
  bool operator==(const RailExtras&) const = default;
};
// Reads those for the rail NICs of `node` under `sysfs` and `procfs` (roots, for tests).
RailExtras read_rail_extras(const Node& node, const std::string& sysfs = "/sys", const std::string& procfs = "/proc");

// The rail layout as one comparable text: per GPU (bus id) its rail NICs (OpenFabrics name or bus
// id, link layer, port states, with `extras`: each port's @subnet prefix, an Ethernet NIC's ip=
// networks) and path class. Host names and cores are not in it.
std::string rail_layout(const Node& node, const RailOptions& options = {}, const RailExtras* extras = nullptr);
// "HOST rails/1:<FNV-1a of the layout, 16 hex> LAYOUT": what `trainrt-topo rail-signature` prints.
std::string rail_signature_line(const std::string& host, const Node& node, const RailOptions& options = {},
                                const RailExtras* extras = nullptr);

struct RailCheck {
  bool mismatch = false;               // more than one layout among the nodes
  std::string report;                  // layouts, largest group first, with their nodes
  std::vector<std::string> differing;  // nodes outside the largest group
};
// Reads signature lines (one per node; `srun -l` prefixes allowed); throws trainrt::Error on a line
// that is not one, or whose hash does not match its layout. At most 65536 lines of 64 KiB. The
// reference layout is the largest group's; between groups of one size, the group of the earliest
// line (so with two nodes, the second is named). A host's repeated identical line counts once.
RailCheck check_rail_signatures(const std::string& text);

}  // namespace trainrt::topo
