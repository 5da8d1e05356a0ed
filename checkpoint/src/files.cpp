#include "files.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "trainrt/error.hpp"
#include "trainrt/number.hpp"

namespace trainrt::checkpoint {
namespace {

[[noreturn]] void fail(const std::string& what, const std::string& path, int err) {
  throw CheckpointError(fmt::format("{}: {}", what, describe_open_error(err)), path);
}

#if defined(TRAINRT_TEST_HOOKS)
// Test hook, compiled only into test builds (TRAINRT_TEST_HOOKS): TRAINRT_CKPT_FAIL_WRITE_AFTER=N
// makes writes fail with EIO once N bytes have been written by this process, and
// TRAINRT_CKPT_FAIL_RANK limits it to one PMIx rank.
bool injected_failure(std::size_t about_to_write) {
  static const long long limit = [] {
    const char* v = std::getenv("TRAINRT_CKPT_FAIL_WRITE_AFTER");
    const char* r = std::getenv("TRAINRT_CKPT_FAIL_RANK");
    const char* me = std::getenv("PMIX_RANK");
    if (!v) return -1LL;
    if (r && std::string(r) != (me ? me : "0")) return -1LL;
    return trainrt::parse_number<long long>(v, "a byte count", 0, LLONG_MAX, "TRAINRT_CKPT_FAIL_WRITE_AFTER");
  }();
  static long long written = 0;
  if (limit < 0) return false;
  written += static_cast<long long>(about_to_write);
  return written > limit;
}
#else
constexpr bool injected_failure(std::size_t) { return false; }
#endif

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

// O_DIRECT on or off for the one descriptor (F_SETFL may change it): no second open of the name.
bool set_direct(int fd, bool on) {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0) return false;
  return ::fcntl(fd, F_SETFL, on ? (flags | O_DIRECT) : (flags & ~O_DIRECT)) == 0;
}

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a regular file";
}

std::string strip_trailing_slashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

}  // namespace

std::string describe_open_error(int err) {
  if (err == ELOOP) return "is a symbolic link (checkpoints never follow one)";
  return std::strerror(err);
}

std::string pwrite_all(int fd, const void* data, std::size_t bytes, std::uint64_t at) {
  const auto* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t w = ::pwrite(fd, p, bytes, static_cast<off_t>(at));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return std::strerror(w < 0 ? errno : EIO);
    p += w, at += static_cast<std::uint64_t>(w), bytes -= static_cast<std::size_t>(w);
  }
  return {};
}

std::string pread_all(int fd, void* data, std::size_t bytes, std::uint64_t at) {
  auto* p = static_cast<char*>(data);
  while (bytes > 0) {
    const ssize_t r = ::pread(fd, p, bytes, static_cast<off_t>(at));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return std::strerror(errno);
    if (r == 0) return fmt::format("short read at byte {}", at);
    p += r, at += static_cast<std::uint64_t>(r), bytes -= static_cast<std::size_t>(r);
  }
  return {};
}

Dir Dir::open(const std::string& given) {
  const std::string path = strip_trailing_slashes(given);
  if (path.empty()) throw UsageError("no checkpoint directory given", "checkpoint");
  Fd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) {
    const int err = errno;
    struct stat st {};
    if ((err == ELOOP || err == ENOTDIR) && ::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode))
      throw CheckpointError("is a symbolic link: give the directory itself (checkpoints never follow a symlink)", path);
    fail("cannot read checkpoint directory", path, err);
  }
  return Dir(std::move(fd), path);
}

Dir Dir::open_or_create(const std::string& given) {
  const std::string path = strip_trailing_slashes(given);
  if (path.empty()) throw UsageError("no checkpoint directory given", "checkpoint");
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
    const int err = errno;
    struct stat st {};
    // Already there (a read-only mount or an unwritable parent answer before EEXIST): open it.
    if (::lstat(path.c_str(), &st) != 0) fail("cannot create directory", path, err);
  }
  return open(path);
}

struct stat Dir::stat() const {
  struct stat st {};
  if (::fstat(fd_.get(), &st) != 0) fail("cannot stat", path_, errno);
  return st;
}

std::optional<Dir> Dir::sub(const std::string& name, std::string* why) const {
  Fd fd(::openat(fd_.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) {
    const int err = errno;
    if (why) {
      struct stat st {};
      if (::fstatat(fd_.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(st.st_mode))
        *why = fmt::format("{} is {}, not a directory", name, kind_of(st.st_mode));
      else
        *why = fmt::format("{}: {}", name, describe_open_error(err));
    }
    return std::nullopt;
  }
  return Dir(std::move(fd), path_of(name));
}

Dir Dir::sub_or_create(const std::string& name) const {
  if (::mkdirat(fd_.get(), name.c_str(), 0755) != 0 && errno != EEXIST) fail("cannot create directory", path_of(name), errno);
  std::string why;
  auto d = sub(name, &why);
  if (!d) throw CheckpointError(fmt::format("cannot open directory: {}", why), path_);
  return std::move(*d);
}

std::vector<std::string> Dir::names() const {
  std::vector<std::string> out;
  // A fresh open file description: readdir through a dup would move this one's offset too.
  int fd = ::openat(fd_.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail("cannot read directory", path_, errno);
  DIR* d = ::fdopendir(fd);
  if (!d) {
    const int err = errno;
    ::close(fd);
    fail("cannot read directory", path_, err);
  }
  while (dirent* e = ::readdir(d))
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) out.emplace_back(e->d_name);
  ::closedir(d);
  return out;
}

bool Dir::is_dir(const std::string& name, struct stat* out) const {
  struct stat st {};
  if (::fstatat(fd_.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return false;
  if (out) *out = st;
  return S_ISDIR(st.st_mode);
}

bool Dir::exists(const std::string& name) const {
  struct stat st {};
  return ::fstatat(fd_.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
}

Fd Dir::open_regular(const std::string& name, struct stat& st, std::string& why) const {
  // Look before opening, so no device or FIFO is ever opened (opening some devices acts on them);
  // then compare what was opened with what was looked at, in case the name changed in between.
  struct stat before {};
  if (::fstatat(fd_.get(), name.c_str(), &before, AT_SYMLINK_NOFOLLOW) != 0) {
    why = fmt::format("{}: cannot open: {}", name, std::strerror(errno));
    return Fd();
  }
  if (!S_ISREG(before.st_mode)) {
    why = fmt::format("{} is {}, not a regular file (refused)", name, kind_of(before.st_mode));
    return Fd();
  }
  Fd fd(::openat(fd_.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (!fd) {
    why = fmt::format("{}: cannot open: {}", name, describe_open_error(errno));
    return Fd();
  }
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_ino != before.st_ino || st.st_dev != before.st_dev) {
    why = fmt::format("{} changed while it was opened, or is not a regular file (refused)", name);
    return Fd();
  }
  return fd;
}

std::string Dir::read_small(const std::string& name, std::size_t cap) const {
  struct stat st {};
  std::string why;
  Fd fd = open_regular(name, st, why);
  if (!fd) throw CheckpointError(why, path_);
  if (st.st_size < 0 || static_cast<std::uint64_t>(st.st_size) > cap)
    throw CheckpointError(fmt::format("{} is {} bytes, more than the {}-byte limit", name, st.st_size, cap), path_);
  std::string out(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t got = 0;
  for (;;) {
    if (got == out.size()) {
      if (out.size() > cap)
        throw CheckpointError(fmt::format("{} grew past the {}-byte limit while it was read", name, cap), path_);
      out.resize(std::min(cap + 1, out.size() + 4096));  // it may have grown since fstat
    }
    ssize_t r = ::read(fd.get(), out.data() + got, out.size() - got);
    if (r < 0) {
      if (errno == EINTR) continue;
      fail(fmt::format("cannot read {}", name), path_, errno);
    }
    if (r == 0) break;
    got += static_cast<std::size_t>(r);
  }
  out.resize(got);
  return out;
}

void Dir::write_new(const std::string& name, const std::vector<Piece>& pieces) const {
  const std::string path = path_of(name);
  // A leftover of an earlier attempt (or something planted) goes; unlinking a symlink removes the
  // link, never its target. O_EXCL then guarantees the file written is one this call created.
  if (::unlinkat(fd_.get(), name.c_str(), 0) != 0 && errno != ENOENT) fail("cannot remove the stale file", path, errno);
  Fd fd(::openat(fd_.get(), name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (!fd) fail("cannot create", path, errno);
  bool direct_on = false;
  bool direct_works = true;  // false where the filesystem refuses O_DIRECT (tmpfs on older kernels)
  std::size_t at = 0;
  for (const auto& piece : pieces) {
    const bool want = direct_works && suits_direct(piece, at);
    if (want != direct_on) {
      if (set_direct(fd.get(), want)) {
        direct_on = want;
      } else if (want) {
        direct_works = false;
      } else {
        fail("cannot leave O_DIRECT", path, errno);
      }
    }
    int err = write_all_at(fd.get(), piece.data, piece.bytes, at);
    if (direct_on && (err == EINVAL || err == EOPNOTSUPP)) {  // this filesystem's O_DIRECT rules: write it buffered
      direct_works = false;
      if (!set_direct(fd.get(), false)) fail("cannot leave O_DIRECT", path, errno);
      direct_on = false;
      err = write_all_at(fd.get(), piece.data, piece.bytes, at);
    }
    check_write(err, path);
    at += piece.bytes;
  }
  if (::fsync(fd.get()) != 0) fail("fsync failed", path, errno);
  // close() can report a deferred write error (NFS): check it rather than leave it to ~Fd.
  if (::close(fd.release()) != 0) fail("close failed", path, errno);
}

void Dir::rename(const std::string& from, const std::string& to) const {
  if (::renameat(fd_.get(), from.c_str(), fd_.get(), to.c_str()) != 0)
    fail(fmt::format("rename from {} failed", from), path_of(to), errno);
}

void Dir::fsync() const {
  if (::fsync(fd_.get()) != 0) fail("fsync of directory failed", path_, errno);
}

bool Dir::unlink(const std::string& name) const {
  return ::unlinkat(fd_.get(), name.c_str(), 0) == 0 || errno == ENOENT;
}

bool Dir::rmdir(const std::string& name) const {
  return ::unlinkat(fd_.get(), name.c_str(), AT_REMOVEDIR) == 0 || errno == ENOENT;
}

}  // namespace trainrt::checkpoint
