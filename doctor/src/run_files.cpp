#include "run_files.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "trainrt/error.hpp"

namespace trainrt::doctor {
namespace {

constexpr std::size_t kBuffer = 64u << 10;

const char* kind_of(mode_t m) {
  if (S_ISLNK(m)) return "a symbolic link";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISDIR(m)) return "a directory";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

struct DirStream {
  DIR* d = nullptr;
  ~DirStream() {
    if (d) ::closedir(d);
  }
};

}  // namespace

RunDir RunDir::open(const std::filesystem::path& path) {
  // The folder the user named is followed like any path they give; what is inside it is not.
  Fd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOCTTY));
  if (!fd) throw Error(fmt::format("cannot open the run folder: {}", std::strerror(errno)), path.string());
  return RunDir(std::move(fd), path.string());
}

std::vector<std::string> RunDir::names(std::size_t max, bool& more) const {
  more = false;
  // A fresh open file description: readdir moves its offset, and the folder's own fd stays for openat.
  int fd = ::openat(fd_.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw Error(fmt::format("cannot list the run folder: {}", std::strerror(errno)), path_);
  DirStream ds;
  ds.d = ::fdopendir(fd);
  if (!ds.d) {
    const int err = errno;
    ::close(fd);
    throw Error(fmt::format("cannot list the run folder: {}", std::strerror(err)), path_);
  }
  std::vector<std::string> out;
  for (;;) {
    errno = 0;
    const dirent* e = ::readdir(ds.d);
    if (!e) {
      if (errno != 0) throw Error(fmt::format("listing the run folder failed: {}", std::strerror(errno)), path_);
      return out;
    }
    if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
    if (out.size() >= max) {
      more = true;
      return out;
    }
    out.emplace_back(e->d_name);
  }
}

RankFile open_rank_file(const RunDir& dir, const std::string& name) {
  RankFile f;
  // Look first, so a FIFO or a device is never opened at all (opening some devices acts on them);
  // then open without following or blocking and check the descriptor itself, in case the name was
  // replaced in between.
  struct stat before {};
  if (::fstatat(dir.fd(), name.c_str(), &before, AT_SYMLINK_NOFOLLOW) != 0) {
    f.err = errno;
    f.why = fmt::format("{}: cannot read: {}", name, std::strerror(f.err));
    return f;
  }
  if (!S_ISREG(before.st_mode)) {
    f.not_regular = true;
    f.why = fmt::format("{}: {}, not a regular file: not read", name, kind_of(before.st_mode));
    return f;
  }
  f.fd = Fd(::openat(dir.fd(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (!f.fd) {
    const int err = errno;
    if (err == ELOOP) {  // became a link since the look: someone else's doing, like a FIFO
      f.not_regular = true;
      f.why = fmt::format("{}: a symbolic link, not a regular file: not read", name);
    } else {
      f.err = err;
      f.why = fmt::format("{}: cannot read: {}", name, std::strerror(err));
    }
    return f;
  }
  if (::fstat(f.fd.get(), &f.st) != 0) {
    f.err = errno;
    f.why = fmt::format("{}: cannot read: {}", name, std::strerror(f.err));
    f.fd.reset();
    return f;
  }
  if (!S_ISREG(f.st.st_mode) || f.st.st_ino != before.st_ino || f.st.st_dev != before.st_dev) {
    f.not_regular = true;
    f.why = fmt::format("{}: replaced while it was opened ({}): not read", name, kind_of(f.st.st_mode));
    f.fd.reset();
  }
  return f;
}

ByteSource::ByteSource(int fd, std::uint64_t offset, std::uint64_t limit)
    : fd_(fd), offset_(offset), left_(limit), buf_(new char[kBuffer]) {}

bool ByteSource::fill() {
  if (left_ == 0 || err_ != 0) return false;
  for (;;) {
    const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(kBuffer, left_));
    const ssize_t n = ::pread(fd_, buf_.get(), want, static_cast<off_t>(offset_));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      err_ = errno;
      return false;
    }
    if (n == 0) {
      left_ = 0;
      return false;
    }
    pos_ = 0;
    len_ = static_cast<std::size_t>(n);
    offset_ += len_;
    left_ -= len_;
    consumed_ += len_;
    return true;
  }
}

}  // namespace trainrt::doctor
