#pragma once
// The plain C++ model of one node: what hwloc or an NCCL topology file says, with no library
// handles left in it, so placement is a pure function of this value.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trainrt/topology/cpuset.hpp"

namespace trainrt::topo {

struct Package {
  unsigned os_index = 0;
  CpuSet cpus;

  bool operator==(const Package&) const = default;
};

struct NumaNode {
  unsigned os_index = 0;
  CpuSet cpus;
  std::uint64_t memory_bytes = 0;  // 0 when the source does not record it
  int package = -1;                // os index of the package holding it, -1 when unknown

  bool operator==(const NumaNode&) const = default;
};

struct Core {
  unsigned os_index = 0;
  CpuSet pus;          // hardware threads of this core
  int numa = -1;       // os index of the NUMA node holding it
  int package = -1;

  bool operator==(const Core&) const = default;
};

// One vertex of the PCIe tree. Host bridges are the roots; `locality` is the NUMA set of the
// CPU-side object they hang from.
enum class PciKind { HostBridge, Bridge, Device };

struct PciNode {
  PciKind kind = PciKind::Device;
  int parent = -1;           // index into Node::pci, -1 for a root
  std::string busid;         // dddd:bb:dd.f, empty for a host bridge without one
  std::uint16_t vendor = 0;
  std::uint16_t device = 0;
  std::uint16_t class_id = 0;  // base class << 8 | subclass, e.g. 0x0302
  std::vector<unsigned> numa;  // NUMA os indexes local to this subtree
  int package = -1;

  bool operator==(const PciNode&) const = default;
};

struct Gpu {
  unsigned index = 0;          // position in PCI bus order = CUDA order with CUDA_DEVICE_ORDER=PCI_BUS_ID
  std::string busid;
  std::uint16_t vendor = 0;
  std::uint16_t device = 0;
  std::string model;           // PCIDevice/GPUModel text when recorded
  std::string cuda_name;       // "cuda0" when the source has CUDA OS devices
  std::string nvml_name;       // "nvml0" when the source has NVML OS devices
  std::string uuid;
  int pci = -1;                // index into Node::pci
  std::vector<unsigned> numa;  // local NUMA os indexes
  CpuSet local_cpus;

  bool operator==(const Gpu&) const = default;
};

// Efa: AWS Elastic Fabric Adapter (PCI class Ethernet, but its own RDMA fabric reached via libfabric).
enum class LinkLayer { InfiniBand, Ethernet, Efa, Unknown };

struct NicPort {
  unsigned number = 1;
  int state = -1;  // IB verbs port state (4 = ACTIVE) when recorded, -1 otherwise

  bool operator==(const NicPort&) const = default;
};

struct Nic {
  unsigned index = 0;          // position in PCI bus order
  std::string busid;
  std::uint16_t vendor = 0;
  std::uint16_t device = 0;
  std::uint16_t class_id = 0;
  std::string model;
  LinkLayer link = LinkLayer::Unknown;
  std::string rdma_name;       // OpenFabrics device, e.g. mlx5_3; empty when none recorded
  std::vector<std::string> netdevs;  // network interfaces, e.g. ib0, eno4np0
  std::vector<NicPort> ports;  // empty when the source records none
  bool rdma = false;           // has an OpenFabrics (verbs) device, or comes from an NCCL file
  std::optional<double> pcie_gbytes_s;  // PCIe link bandwidth (GB/s) when recorded
  int pci = -1;
  std::vector<unsigned> numa;
  CpuSet local_cpus;

  bool operator==(const Nic&) const = default;
};

struct Node {
  std::string hostname;
  std::string source;          // "live", "hwloc-xml:<path>", "nccl-xml:<path>"
  bool cores_are_pus = false;  // the source has no core objects (NCCL files): one PU = one core
  std::vector<Package> packages;
  std::vector<NumaNode> numa_nodes;  // ascending os index
  std::vector<Core> cores;           // ascending by first PU
  std::vector<PciNode> pci;
  std::vector<Gpu> gpus;             // PCI bus order
  std::vector<Nic> nics;             // PCI bus order
  CpuSet all_cpus;

  // Whole-model equality: the cache round trip and the two loaders are compared with it.
  bool operator==(const Node&) const = default;
  const NumaNode* numa_by_os(unsigned os_index) const;
};

const char* to_string(LinkLayer link);
const char* to_string(PciKind kind);

}  // namespace trainrt::topo
