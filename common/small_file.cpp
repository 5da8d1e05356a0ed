#include "trainrt/small_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "trainrt/fd.hpp"

namespace trainrt {

std::optional<std::string> read_small_file(const std::string& path, std::size_t max_bytes, LastLink link) {
  int flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY;
  if (link == LastLink::refuse) flags |= O_NOFOLLOW;
  Fd fd(::open(path.c_str(), flags));
  if (!fd) return std::nullopt;
  std::string out(max_bytes, '\0');
  std::size_t got = 0;
  while (got < max_bytes) {
    const ssize_t n = ::read(fd.get(), out.data() + got, max_bytes - got);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      return std::nullopt;
    }
    got += static_cast<std::size_t>(n);
  }
  out.resize(got);
  return out;
}

}  // namespace trainrt
