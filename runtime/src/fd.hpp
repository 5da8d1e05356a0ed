#pragma once
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <utility>

namespace trainrt {

// RAII for a file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }  // the caller closes it
  explicit operator bool() const { return fd_ >= 0; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// RAII for an mmap'ed region.
class Mapping {
 public:
  Mapping() = default;
  Mapping(void* addr, std::size_t len) : addr_(addr), len_(len) {}
  ~Mapping() {
    if (addr_) ::munmap(addr_, len_);
  }
  Mapping(Mapping&& o) noexcept : addr_(std::exchange(o.addr_, nullptr)), len_(o.len_) {}
  Mapping& operator=(Mapping&&) = delete;
  Mapping(const Mapping&) = delete;
  std::byte* data() const { return static_cast<std::byte*>(addr_); }
  std::size_t size() const { return len_; }

 private:
  void* addr_ = nullptr;
  std::size_t len_ = 0;
};

}  // namespace trainrt
