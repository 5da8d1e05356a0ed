#include "file_checks.hpp"

#include <fmt/format.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "trainrt/error.hpp"

namespace trainrt::topo {

void require_readable_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw Error(fmt::format("cannot open topology file: {}", std::strerror(errno)), path);
  if (!S_ISREG(st.st_mode)) throw Error("topology path is not a regular file", path);
  if (st.st_size == 0) throw Error("topology file is empty", path);
  std::ifstream in(path);
  if (!in) throw Error(fmt::format("cannot read topology file: {}", std::strerror(errno)), path);
}

std::string read_whole_file(const std::string& path) {
  require_readable_file(path);
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (!in.good() && !in.eof()) throw Error("read error", path);
  return ss.str();
}

}  // namespace trainrt::topo
