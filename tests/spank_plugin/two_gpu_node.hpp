#pragma once
// The node the plugin's logic tests place on: 2 NUMA nodes x 4 cores (no SMT), a GPU and an
// InfiniBand NIC on one PCIe switch per NUMA node (GPU 0 / mlx5_0 on NUMA 0, GPU 1 / mlx5_1 on 1).
#include "../topology/synthetic_topology.hpp"
#include "trainrt/topology/load.hpp"
#include "trainrt/topology/node.hpp"

namespace trainrt::testing {

inline const topo::Node& two_gpu_node() {
  static const topo::Node n = [] {
    SynthNode s;
    s.threads_per_core = 1;
    auto numa = [](const char* gpu, const char* nic, const char* name) {
      return SynthNuma{4, {{{SynthSwitch{{gpu}, {{nic, name, "", 0x0207, 1}}}}}}};
    };
    s.packages = {{{numa("0000:05:00.0", "0000:04:00.0", "mlx5_0"), numa("0000:85:00.0", "0000:84:00.0", "mlx5_1")}}};
    return topo::load_hwloc_xml(write_hwloc_xml(s, "two-gpu-node"));
  }();
  return n;
}

}  // namespace trainrt::testing
