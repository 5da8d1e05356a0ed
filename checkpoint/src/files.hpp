#pragma once
// Checkpoint file access that cannot be redirected: everything is opened relative to a directory
// file descriptor, one name at a time, never following a symlink (O_NOFOLLOW, openat, unlinkat,
// renameat). Reads open non-blocking (a FIFO cannot hang them) and refuse anything but a regular
// file before reading a byte; small files are read only up to a cap. Temporary files are created
// exclusively. Every failure names the path and the errno text.
#include <sys/stat.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trainrt/fd.hpp"

namespace trainrt::checkpoint {

struct Piece {
  const void* data;
  std::size_t bytes;
};
// Pieces of at least 1 MiB whose address, size and file offset are multiples of kDirectAlign are
// written around the page cache (O_DIRECT) where the filesystem allows it.
constexpr std::size_t kDirectAlign = 4096;

class Dir {
 public:
  Dir() = default;
  // `path` as a directory; a symlink as its last component is refused (the components before it
  // are the caller's own path and are followed). Trailing slashes are ignored, so "ckpt/" cannot
  // smuggle a symlink past the check.
  static Dir open(const std::string& path);
  // The same, creating the last component (mode 0755 less the umask) when it is missing.
  static Dir open_or_create(const std::string& path);

  int fd() const { return fd_.get(); }
  const std::string& path() const { return path_; }  // for messages only: never opened again
  std::string path_of(const std::string& name) const { return path_ + "/" + name; }
  struct stat stat() const;

  // A subdirectory (no symlink); nullopt with `why` filled when it cannot be opened as one.
  std::optional<Dir> sub(const std::string& name, std::string* why = nullptr) const;
  Dir sub_or_create(const std::string& name) const;  // throws
  // Names in this directory (not "." or ".."), and whether one is a real directory / exists at all.
  std::vector<std::string> names() const;
  bool is_dir(const std::string& name, struct stat* st = nullptr) const;
  bool exists(const std::string& name) const;

  // A regular file opened for reading, or Fd() with `why` filled ("is a symbolic link", "is a
  // FIFO, not a regular file", errno text). `st` receives its fstat.
  Fd open_regular(const std::string& name, struct stat& st, std::string& why) const;
  // The whole of a small regular file; throws trainrt::Error when it cannot be read or is larger
  // than `cap` bytes (decided from fstat before anything is allocated, and held to while reading).
  std::string read_small(const std::string& name, std::size_t cap) const;

  // Creates `name` exclusively (a stale file of that name is unlinked first: a symlink planted
  // there is removed, never followed), writes the pieces, fsyncs and closes it.
  void write_new(const std::string& name, const std::vector<Piece>& pieces) const;
  void rename(const std::string& from, const std::string& to) const;  // renameat within this dir
  void fsync() const;
  bool unlink(const std::string& name) const;  // false when it failed (ENOENT is success)
  bool rmdir(const std::string& name) const;

 private:
  Dir(Fd fd, std::string path) : fd_(std::move(fd)), path_(std::move(path)) {}
  Fd fd_;
  std::string path_;
};

// Text for an open/openat errno that came from O_NOFOLLOW or O_DIRECTORY meeting the wrong kind.
std::string describe_open_error(int err);

// All `bytes` at offset `at` of `fd`, through short reads/writes and EINTR: "" or why not.
std::string pread_all(int fd, void* data, std::size_t bytes, std::uint64_t at);
std::string pwrite_all(int fd, const void* data, std::size_t bytes, std::uint64_t at);

}  // namespace trainrt::checkpoint
