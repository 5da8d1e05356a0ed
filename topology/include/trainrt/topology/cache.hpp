#pragma once
// A digested topology cache: the Node a loader built, in a small versioned binary
// file, written once per boot by root and read by every step instead of parsing XML or walking
// sysfs. The file carries what makes it stale; a cache that is stale, not root's (or the
// reader's), writable by others, a link, truncated or corrupt is never used.
#include <cstdint>
#include <string>
#include <string_view>

#include "trainrt/topology/load.hpp"  // load_cached_or_live, kDefaultCachePath
#include "trainrt/topology/node.hpp"

namespace trainrt::topo {

// Largest cache file read: a Node of kMaxPciNodes PCI vertices and kMaxCpus cores stays below.
inline constexpr std::size_t kMaxCacheBytes = 16u << 20;

// What the cached Node was built from. Two stamps equal = the cache describes this machine now.
struct CacheStamp {
  std::string boot_id;        // /proc/sys/kernel/random/boot_id
  std::string hwloc_version;  // the runtime hwloc's "2.9.0"
  std::uint64_t devices_hash = 0;   // sysfs PCI device names, net interfaces, RDMA port states
  std::uint32_t devices_count = 0;
  // The source: "live", or the topology file's path with its identity (device, inode, size,
  // mtime and ctime in ns, any change of content moves ctime) and a hash of its content.
  std::string source;
  std::uint64_t file_dev = 0, file_ino = 0, file_size = 0;
  std::int64_t file_mtime_ns = 0, file_ctime_ns = 0;
  std::uint64_t file_hash = 0;  // recorded at write time for people; identity is what a step checks

  bool operator==(const CacheStamp&) const = default;
};

struct CachedNode {
  CacheStamp stamp;
  Node node;
};

// The stamp of this machine now, for a Node loaded live (xml_path empty) or from xml_path.
// `with_content_hash` reads the file to hash it (writers); readers compare identity only.
CacheStamp current_stamp(const std::string& xml_path, bool with_content_hash);

// The file's bytes: magic, format version, the stamp, the Node, then a checksum of all before it.
// Every integer is little-endian with an explicit width; every string and list has a length.
std::string encode_cache(const CachedNode& cached);
// Throws trainrt::Error naming `context` on a bad magic or version, a checksum mismatch, any length
// or count beyond the caps of node_builder.hpp, an index out of range, or trailing bytes.
CachedNode decode_cache(std::string_view bytes, const std::string& context);
// FNV-1a 64 (the checksum and the content hashes); exposed so tests can forge valid checksums.
std::uint64_t fnv1a64(std::string_view bytes, std::uint64_t seed = 0xcbf29ce484222325ull);

// Reads and decodes `path` after checking the file: opened without following a link, a regular
// file owned by root or the effective user, not group/world-writable, in a directory with the same
// properties, at most kMaxCacheBytes. Does not check staleness. Throws trainrt::Error naming path.
CachedNode read_cache_file(const std::string& path);
// Throws trainrt::Error naming the first field of `have` that differs from `want`.
void check_fresh(const CacheStamp& have, const CacheStamp& want, const std::string& path);

// Writes atomically (a temporary file in the same directory, fsync, rename) with mode 0644,
// creating the last directory component (0755) when it is missing.
void write_cache_file(const CachedNode& cached, const std::string& path);

// The generated NCCL topology (NCCL_TOPO_FILE) that `trainrt-topo --write-cache` writes beside the
// cache: "/run/train-runtime/topology.cache" -> "/run/train-runtime/topology.nccl.xml" (a path not
// ending in ".cache" gets ".nccl.xml" appended).
std::string nccl_topo_path(const std::string& cache_path);
// Writes render_nccl_topology(node) there atomically (0644); a node without GPUs gets none (an old
// file is removed).
void write_nccl_topo_file(const Node& node, const std::string& cache_path);
// "" when `path` may be handed to NCCL for `node`: trusted like the cache (no link, regular, root's
// or ours, not writable by others, nor its directory or ancestors) and byte for byte the rendering
// of `node` (so it is exactly as fresh as the cache it was written with). Else why not.
std::string check_nccl_topo_file(const Node& node, const std::string& path);

}  // namespace trainrt::topo
