#pragma once
// Three ways to obtain a Node. Each throws trainrt::Error naming the input on any problem; none
// silently falls back to another source.
#include <string>

#include "trainrt/topology/node.hpp"

namespace trainrt::topo {

Node load_live();
Node load_hwloc_xml(const std::string& path);  // hwloc 1.x and 2.x formats
Node load_nccl_xml(const std::string& path);   // the NCCL_TOPO_FILE format (<system version="1">)
// Picks by content: an NCCL <system> root or an hwloc <topology> root.
Node load_file(const std::string& path);

}  // namespace trainrt::topo
