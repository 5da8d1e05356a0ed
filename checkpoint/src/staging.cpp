#include "staging.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>

#include "trainrt/error.hpp"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; headers before glibc 2.35 lack the name
#endif

namespace trainrt::checkpoint {

template <class T>
T* Staging::PageAligned<T>::allocate(std::size_t n) {
  const std::size_t bytes = (std::max<std::size_t>(n * sizeof(T), 1) + kDirectAlign - 1) / kDirectAlign * kDirectAlign;
  void* p = std::aligned_alloc(kDirectAlign, bytes);
  if (!p) throw std::bad_alloc();
  return static_cast<T*>(p);
}

template <class T>
void Staging::PageAligned<T>::deallocate(T* p, std::size_t) noexcept {
  std::free(p);
}

Staging::~Staging() { unmap(); }

void Staging::resize(std::size_t bytes) {
  size_ = bytes;
  if (!file_backed_) anonymous_.resize(bytes);
}

std::byte* Staging::data() {
  if (map_) return head() + head_;
  if (anonymous_.size() != size_) anonymous_.resize(size_);
  return anonymous_.data();
}

void Staging::release_anonymous() {
  if (!file_backed_) return;
  anonymous_.clear();
  anonymous_.shrink_to_fit();
}

std::string allocate_pages(int fd, std::uint64_t bytes) {
  // tmpfs gives pages on first touch, and one that cannot be had then is a SIGBUS. posix_fallocate
  // would fall back to writing zeros where fallocate is missing; fallocate itself says EOPNOTSUPP
  // and map_populated touches the pages either way.
  if (::fallocate(fd, 0, 0, static_cast<off_t>(bytes)) == 0) return {};
  const int err = errno;
  if (err != EOPNOTSUPP) return fmt::format("cannot allocate {} bytes for the memory tier: {}", bytes, std::strerror(err));
  // Never shorter: a longer file is a committed step's shard whose tail (its blobs) must stay.
  struct stat st {};
  if (::fstat(fd, &st) == 0 && static_cast<std::uint64_t>(st.st_size) >= bytes) return {};
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0)
    return fmt::format("cannot size the memory tier file to {} bytes: {}", bytes, std::strerror(errno));
  return {};
}

void* map_populated(int fd, std::size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return p;
  auto* base = static_cast<std::byte*>(p);
  for (std::size_t at = 0; at < bytes; at += kPopulatePiece) {
    if (::madvise(base + at, std::min(kPopulatePiece, bytes - at), MADV_POPULATE_WRITE) == 0) continue;
    const int err = errno;
    ::munmap(p, bytes);
    // Kernels before 5.14 have no MADV_POPULATE_WRITE: the old way, lock held throughout.
    if (err == EINVAL) return ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    errno = err;  // ENOMEM, EFAULT (a page tmpfs could not give): the mapping is not usable
    return MAP_FAILED;
  }
  return p;
}

std::byte* map_tier_pages(int fd, std::uint64_t bytes, const std::string& where) {
  if (std::string why = allocate_pages(fd, bytes); !why.empty()) throw Error(why, where);
  void* p = map_populated(fd, bytes);
  if (p == MAP_FAILED) throw Error(fmt::format("cannot map {} bytes of the memory tier: {}", bytes, std::strerror(errno)), where);
  return static_cast<std::byte*>(p);
}

void Staging::map(Fd fd, std::size_t head, const std::string& path) {
  unmap();
  const std::size_t bytes = head + size_;
  void* p = map_tier_pages(fd.get(), bytes, path);
  map_ = p;
  map_bytes_ = bytes;
  head_ = head;
  fd_ = std::move(fd);
  anonymous_.clear();
  anonymous_.shrink_to_fit();
}

void Staging::unmap() {
  if (map_) ::munmap(map_, map_bytes_);
  map_ = nullptr;
  map_bytes_ = head_ = 0;
  fd_.reset();
}

}  // namespace trainrt::checkpoint
