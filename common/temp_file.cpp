#include "trainrt/temp_file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>

#include "trainrt/error.hpp"

namespace trainrt {
namespace {

constexpr int kTries = 16;

// 64 unpredictable bits; without getrandom (a seccomp filter, an old kernel) a mix that still
// differs between processes and calls, so O_EXCL keeps working even if it can be guessed.
std::uint64_t random_suffix() {
  std::uint64_t v = 0;
  if (::getrandom(&v, sizeof v, GRND_NONBLOCK) == static_cast<ssize_t>(sizeof v)) return v;
  static std::atomic<std::uint64_t> counter{0};
  const auto now = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  return (now * 0x9e3779b97f4a7c15ull) ^ (static_cast<std::uint64_t>(::getpid()) << 32) ^ counter.fetch_add(1);
}

[[noreturn]] void fail(const std::string& doing, const std::string& where, int err) {
  throw Error(fmt::format("{}: {}", doing, std::strerror(err)), where);
}

}  // namespace

TempFile create_temp_file(int dir_fd, std::string_view stem, mode_t mode, const std::string& dir_for_messages) {
  if (stem.empty() || stem.find('/') != std::string_view::npos)
    throw Error(fmt::format("'{}' cannot name a file in a directory", stem), dir_for_messages);
  int err = 0;
  for (int i = 0; i < kTries; ++i) {
    TempFile t;
    t.name = fmt::format("{}.tmp.{:016x}", stem, random_suffix());
    t.fd = Fd(::openat(dir_fd, t.name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, mode));
    if (t.fd) return t;
    err = errno;
    if (err != EEXIST && err != EINTR) break;
  }
  fail(fmt::format("cannot create a temporary file for {}", stem), dir_for_messages, err);
}

void replace_file(const std::string& path, std::string_view bytes, mode_t mode, const char* what) {
  const std::size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  if (base.empty() || base == "." || base == "..") throw Error(fmt::format("the {} path names no file", what), path);
  const Fd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir_fd) fail(fmt::format("cannot open the {} directory", what), dir, errno);
  TempFile tmp = create_temp_file(dir_fd.get(), base, 0600, dir);
  const std::string tmp_path = dir + "/" + tmp.name;
  auto undo = [&](const std::string& doing) {
    const int err = errno;
    tmp.fd.reset();
    ::unlinkat(dir_fd.get(), tmp.name.c_str(), 0);
    fail(fmt::format("cannot {} {}", doing, what), tmp_path, err);
  };
  if (::fchmod(tmp.fd.get(), mode) != 0) undo("set the mode of");  // what the file says, whatever the umask
  for (std::size_t off = 0; off < bytes.size();) {
    const ssize_t n = ::write(tmp.fd.get(), bytes.data() + off, bytes.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      undo("write");
    }
    off += static_cast<std::size_t>(n);
  }
  if (::fsync(tmp.fd.get()) != 0) undo("sync");
  // close() can report a deferred write error (NFS): checked rather than left to ~Fd.
  if (::close(tmp.fd.release()) != 0) undo("close");
  if (::renameat(dir_fd.get(), tmp.name.c_str(), dir_fd.get(), base.c_str()) != 0) undo("put in place");
  // The rename itself reaches the disk with the directory; a failure here leaves a complete file.
  if (::fsync(dir_fd.get()) != 0 && errno != EINVAL) fail(fmt::format("cannot sync the {} directory", what), dir, errno);
}

}  // namespace trainrt
