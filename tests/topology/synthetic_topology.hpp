#pragma once
// Writes small hwloc 2.x XML files describing made-up nodes, so unit tests cover each pairing case
// on inputs the tests themselves define.
#include <cstdint>
#include <string>
#include <vector>

namespace trainrt::testing {

struct SynthNic {
  std::string busid;          // e.g. "0000:03:00.0"
  std::string rdma_name;      // OpenFabrics name; empty = no RDMA device
  std::string netdev;         // network interface name; empty = none
  std::uint16_t class_id = 0x0207;  // 0x0207 InfiniBand, 0x0200 Ethernet
  unsigned ports = 1;
  std::uint16_t vendor = 0x15b3;    // Mellanox; 0x1d0f Amazon (device 0xefa0 EFA, 0xec20 ENA)
  std::uint16_t device = 0x101b;
};

// Devices under one PCIe switch (an upstream bridge with one downstream bridge per device).
struct SynthSwitch {
  std::vector<std::string> gpus;  // bus ids
  std::vector<SynthNic> nics;
};

struct SynthHostBridge {
  std::vector<SynthSwitch> switches;
};

struct SynthNuma {
  unsigned cores = 4;
  std::vector<SynthHostBridge> bridges;
};

struct SynthPackage {
  std::vector<SynthNuma> numas;
};

struct SynthNode {
  std::string hostname = "synth";
  unsigned threads_per_core = 2;
  std::vector<SynthPackage> packages;
};

// Writes the node to a fresh file under the test temp dir and returns its path. PU numbering is
// Linux's: thread t of core c is PU c + t * total_cores. NUMA os indexes count up across packages.
std::string write_hwloc_xml(const SynthNode& node, const std::string& name);

// A fresh, empty directory for one test's files.
std::string temp_dir(const std::string& name);

}  // namespace trainrt::testing
