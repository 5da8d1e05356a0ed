#pragma once
// Reading a topology file without trusting it: one descriptor, bounded size, and an XML parse whose
// every size and depth is capped before a loader (or hwloc) walks the tree. The caps are the ones
// docs/hostile-inputs.md ("Topology") documents; a file beyond one is an error naming it.
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <pugixml.hpp>
#include <string>
#include <utility>

#include "trainrt/fd.hpp"

namespace trainrt::topo {

// The one place files are opened and read for topology work: a regular file opened without
// blocking (a FIFO cannot hang a step), at most `max_bytes`, read whole through the descriptor
// (a file growing while read is caught, not cut). `what` names the file in errors ("topology
// file", "topology cache"). With `trusted`, also: opened without following a link, owned by root or
// the effective user, not group/world-writable, and so is its directory and every ancestor up to
// '/' (a group/world-writable ancestor is accepted only with the sticky bit, like /tmp, where no
// one else can rename our entries). Throws trainrt::Error naming `path`.
struct FileRead {
  std::string bytes;
  struct stat st {};
};
FileRead read_checked_file(const std::string& path, std::size_t max_bytes, const char* what, bool trusted);

// The directory chain check of read_checked_file(trusted): `dir` and every ancestor.
void check_trusted_directory(const std::string& dir, const char* what);

// Writes `bytes` atomically with replace_file (trainrt/temp_file.hpp: a temporary beside `path`
// created exclusively under a random name, mode 0644 whatever the umask, fsync, rename, fsync of the
// directory). Creates the last directory component (0755) when missing.
void write_file_atomic(const std::string& path, const std::string& bytes, const char* what);

// The largest file read (real hwloc XMLs of 256-PU GPU servers are about 300 KB).
inline constexpr std::size_t kMaxTopologyFileBytes = 16u << 20;
// At most this many '<' in the text, counted before pugixml parses it, so the parse builds at most
// about twice as many nodes whatever the file holds.
inline constexpr std::size_t kMaxXmlMarkup = 1u << 19;
// Deepest element nesting (the root element is depth 1). hwloc's XML import and its later passes
// recurse once per level; real files are about 20 deep. libxml2 itself stops at 256.
inline constexpr unsigned kMaxXmlDepth = 128;
// Longest attribute value (hwloc info strings; a cpuset of CpuSet::kMaxCpus bits takes about 6 KB).
inline constexpr std::size_t kMaxXmlAttributeBytes = 64u << 10;

// The whole file read through one descriptor opened without blocking (a FIFO cannot hang us):
// a non-empty regular file of at most kMaxTopologyFileBytes. Throws trainrt::Error naming `path`,
// so a missing file can never let hwloc fall back to the live machine.
std::string read_topology_file(const std::string& path);

// Parses `text` into `doc` once its size, markup count, NUL bytes and DOCTYPE internal subset
// (entity definitions) are checked, then checks every element's depth and attribute lengths with
// an iterative walk. Throws trainrt::Error naming `path`.
void parse_topology_xml(const std::string& text, const std::string& path, pugi::xml_document& doc);

// Calls fn(element, depth) for every element below `root`, parents before children, without
// recursion (depth 1 = root's children).
template <typename Fn>
void for_each_element(const pugi::xml_node& root, Fn&& fn) {
  pugi::xml_node n = root.first_child();
  unsigned depth = 1;
  while (n) {
    if (n.type() == pugi::node_element) fn(n, depth);
    if (n.first_child()) {
      n = n.first_child();
      ++depth;
      continue;
    }
    while (n && n != root && !n.next_sibling()) {
      n = n.parent();
      --depth;
    }
    if (!n || n == root) break;
    n = n.next_sibling();
  }
}

}  // namespace trainrt::topo
