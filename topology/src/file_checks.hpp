#pragma once
#include <string>

namespace trainrt::topo {

// Throws trainrt::Error naming `path` unless it is a readable, non-empty regular file, so a
// missing file can never let hwloc fall back to the live machine.
void require_readable_file(const std::string& path);
// The whole file; throws like require_readable_file.
std::string read_whole_file(const std::string& path);

}  // namespace trainrt::topo
