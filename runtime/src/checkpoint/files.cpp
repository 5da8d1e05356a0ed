#include "files.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "../fd.hpp"
#include "trainrt/error.hpp"

namespace trainrt::checkpoint {
namespace {

[[noreturn]] void fail(const std::string& what, const std::string& path, int err) {
  throw Error(fmt::format("{}: {}", what, std::strerror(err)), path);
}

// Test hook: TRAINRT_CKPT_FAIL_WRITE_AFTER=N makes writes fail with EIO once N bytes have been
// written by this process (and TRAINRT_CKPT_FAIL_RANK limits it to one PMIx rank).
bool injected_failure(std::size_t about_to_write) {
  static const long long limit = [] {
    const char* v = std::getenv("TRAINRT_CKPT_FAIL_WRITE_AFTER");
    const char* r = std::getenv("TRAINRT_CKPT_FAIL_RANK");
    const char* me = std::getenv("PMIX_RANK");
    if (!v) return -1LL;
    if (r && std::string(r) != (me ? me : "0")) return -1LL;
    return std::atoll(v);
  }();
  static long long written = 0;
  if (limit < 0) return false;
  written += static_cast<long long>(about_to_write);
  return written > limit;
}

// 0, or the errno of the write that failed (-1: the injected failure).
int write_all_at(int fd, const void* data, std::size_t bytes, std::size_t offset) {
  const auto* p = static_cast<const unsigned char*>(data);
  while (bytes > 0) {
    const std::size_t n = std::min<std::size_t>(bytes, std::size_t{1} << 30);
    if (injected_failure(n)) return -1;
    ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    p += w;
    offset += static_cast<std::size_t>(w);
    bytes -= static_cast<std::size_t>(w);
  }
  return 0;
}

void check_write(int err, const std::string& path) {
  if (err == -1) fail("write failed (injected)", path, EIO);
  if (err != 0) fail("write failed", path, err);
}

// Large page-aligned pieces go around the page cache (O_DIRECT): on the VMs measured this doubles
// write throughput and makes it steady, and a checkpoint does not evict the job's cached data.
constexpr std::size_t kDirectMin = std::size_t{1} << 20;
bool suits_direct(const Piece& piece, std::size_t offset) {
  return piece.bytes >= kDirectMin && piece.bytes % kDirectAlign == 0 && offset % kDirectAlign == 0 &&
         reinterpret_cast<std::uintptr_t>(piece.data) % kDirectAlign == 0;
}

}  // namespace

void write_pieces_durably(const std::string& path, const std::vector<Piece>& pieces) {
  Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd) fail("cannot create", path, errno);
  Fd direct;                 // opened at the first piece that suits it
  bool direct_works = true;  // false where the filesystem refuses O_DIRECT (tmpfs on older kernels)
  std::size_t at = 0;
  for (const auto& piece : pieces) {
    if (direct_works && suits_direct(piece, at)) {
      if (!direct) direct = Fd(::open(path.c_str(), O_WRONLY | O_DIRECT | O_CLOEXEC));
      const int err = direct ? write_all_at(direct.get(), piece.data, piece.bytes, at) : EINVAL;
      if (err != EINVAL && err != EOPNOTSUPP) {  // this filesystem's O_DIRECT rules: write the piece buffered
        check_write(err, path);
        at += piece.bytes;
        continue;
      }
      direct_works = false;
    }
    check_write(write_all_at(fd.get(), piece.data, piece.bytes, at), path);
    at += piece.bytes;
  }
  if (::fsync(fd.get()) != 0) fail("fsync failed", path, errno);
  // close() can report a deferred write error (NFS): check it rather than leave it to ~Fd.
  if (::close(fd.release()) != 0) fail("close failed", path, errno);
}

void write_file_durably(const std::string& path, const void* data, std::size_t bytes) {
  write_pieces_durably(path, {{data, bytes}});
}

void fsync_directory(const std::string& dir) {
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) fail("cannot open directory", dir, errno);
  if (::fsync(fd.get()) != 0) fail("fsync of directory failed", dir, errno);
}

void rename_durably(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) fail(fmt::format("rename from {} failed", from), to, errno);
  std::string dir = to.substr(0, to.find_last_of('/'));
  fsync_directory(dir.empty() ? "." : dir);
}

std::vector<std::uint8_t> read_file(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) fail("cannot open", path, errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) fail("cannot stat", path, errno);
  std::vector<std::uint8_t> out(static_cast<std::size_t>(st.st_size));
  std::size_t got = 0;
  while (got < out.size()) {
    ssize_t r = ::read(fd.get(), out.data() + got, out.size() - got);
    if (r < 0) {
      if (errno == EINTR) continue;
      fail("read failed", path, errno);
    }
    if (r == 0) break;
    got += static_cast<std::size_t>(r);
  }
  out.resize(got);
  return out;
}

void make_directory(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) fail("cannot create directory", path, errno);
}

}  // namespace trainrt::checkpoint
