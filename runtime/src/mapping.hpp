#pragma once
#include <sys/mman.h>

#include <cstddef>
#include <utility>

#include "trainrt/fd.hpp"

namespace trainrt {

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
