#pragma once
// Ways to obtain a Node. Each throws trainrt::Error naming the input on any problem; none but
// load_cached_or_* falls back to another source, and those say so.
#include <string>

#include "trainrt/topology/node.hpp"

namespace trainrt::topo {

Node load_live();
Node load_hwloc_xml(const std::string& path);  // hwloc 1.x and 2.x formats
Node load_nccl_xml(const std::string& path);   // the NCCL_TOPO_FILE format (<system version="1">)
// Picks by content: an NCCL <system> root or an hwloc <topology> root.
Node load_file(const std::string& path);

// The digested topology cache (trainrt/topology/cache.hpp, docs/topology.md): written once per
// boot by root (`trainrt-topo write-cache`), read by every step instead of discovering.
inline constexpr const char* kDefaultCachePath = "/run/train-runtime/topology.cache";
// The cache at `cache_path` when it is trustworthy and fresh for this source (the live machine,
// or the topology file `xml_path`), else load_live() / load_file(xml_path): the one place that
// falls back, on purpose. `note` receives why the cache was not used; it is "" when it was used
// or when no cache file exists at all (a node whose admin wrote none). An empty `cache_path` means
// no cache (plugstack topology_cache=off). `used` receives whether the cached Node was returned.
Node load_cached_or_live(std::string* note = nullptr, const std::string& cache_path = kDefaultCachePath,
                         bool* used = nullptr);
Node load_cached_or_file(const std::string& xml_path, std::string* note = nullptr,
                         const std::string& cache_path = kDefaultCachePath, bool* used = nullptr);

}  // namespace trainrt::topo
