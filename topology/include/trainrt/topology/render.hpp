#pragma once
// Human and machine renderings of a node and its placement (trainrt-topo, the plugin's `show`).
#include <string>
#include <string_view>

#include "trainrt/topology/placement.hpp"

namespace trainrt::topo {

std::string render_table(const Node& node, const Placement& placement);
// Stable schema "trainrt-topo/1", documented in docs/topology.md.
std::string render_json(const Node& node, const Placement& placement);
// One block of `export NAME=value` lines per rank, shell-quoted.
std::string render_env_script(const Node& node, const Placement& placement);
// The node as an NCCL_TOPO_FILE (<system version="1">): per NUMA node a <cpu> with its affinity and
// the PCIe subtrees holding GPUs and RDMA NICs. load_nccl_xml reads it back to the same rails.
std::string render_nccl_topology(const Node& node);
// One line of printable text: control bytes (a newline included), C1 controls and invalid UTF-8
// become \xNN, so text that came from a file can neither add lines nor drive a terminal.
std::string escape_line(std::string_view s);

}  // namespace trainrt::topo
