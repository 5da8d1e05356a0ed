#pragma once
// Where ../shared/topologies is, or "" (and the caller skips, saying so) when it is absent.
#include <cstdlib>
#include <filesystem>
#include <string>

namespace trainrt::testing {

inline std::string shared_topologies_dir() {
  const char* env = std::getenv("TRAINRT_SHARED_TOPOLOGIES");
  std::string dir = env && *env ? env : TRAINRT_SHARED_TOPOLOGIES;
  return std::filesystem::is_directory(dir) ? dir : std::string{};
}

}  // namespace trainrt::testing
