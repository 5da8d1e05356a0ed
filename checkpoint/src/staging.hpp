#pragma once
// Where save() copies host buffers (the stall): one page-aligned region, reused by every save.
// Without the memory tier it is anonymous memory allocated at registration (as it always was).
// With the tier it is the rank's tier file itself, mapped shared (a tmpfs file's page cache is the
// memory): the copy that stalls training is then also the node-local copy of the shard, and the
// tier costs no second buffer. The file holds a shard exactly as the checkpoint directory would
// (docs/checkpoint.md "Memory tier"), so the mapping starts with `head` bytes reserved for the
// shard header and the region follows.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "files.hpp"
#include "trainrt/fd.hpp"

namespace trainrt::checkpoint {

// Every page of the first `bytes` of a tmpfs file now (fallocate; ftruncate where it is not
// supported, the pages then touched by map_populated), so a full tmpfs is an error here and never
// a SIGBUS in a later copy into its mapping: "" or why not.
std::string allocate_pages(int fd, std::uint64_t bytes);

// The first `bytes` of `fd` mapped shared, read-write, every page touched, in pieces of
// kPopulatePiece: MAP_POPULATE would hold the process's mmap lock for the whole populate (0.4 s a
// GiB on the 2-core VM, seconds with four ranks at it), and a tier mapped in the background then
// stalled the training thread's next mmap/munmap that long: a peer's 2 s collective timeout fired
// at the first step ("timed out after 2000 ms waiting for rank(s) 1", docs/recovery.md). MAP_FAILED
// with errno, as mmap.
inline constexpr std::size_t kPopulatePiece = std::size_t{8} << 20;
void* map_populated(int fd, std::size_t bytes);

// Both: the first `bytes` of a tmpfs file allocated and mapped, every page there; a trainrt::Error
// naming `where` when not.
std::byte* map_tier_pages(int fd, std::uint64_t bytes, const std::string& where);

class Staging {
 public:
  Staging() = default;
  ~Staging();
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;

  // Tier mode: registration only records sizes; memory comes from map() (or, for a restore that
  // needs staging before any save, an anonymous buffer made on demand).
  void set_file_backed(bool on) { file_backed_ = on; }
  bool file_backed() const { return file_backed_; }

  // Registration grew the region to `bytes` (whole pages). Anonymous mode keeps its contents.
  void resize(std::size_t bytes);
  std::size_t size() const { return size_; }
  // The region: the mapping's when mapped, else anonymous memory (allocated on first use in tier
  // mode, so a manager that only saves to the tier never holds it).
  std::byte* data();

  // Maps `fd` (a regular file of this user in the tier) with `head` header bytes before the
  // region: allocates every page of head + size() up front (fallocate, so a full tmpfs is an
  // error here and never a SIGBUS in the middle of a copy) and touches them. Throws Error naming
  // `path` and the errno text; the staging is unmapped then.
  void map(Fd fd, std::size_t head, const std::string& path);
  void unmap();
  bool mapped() const { return map_ != nullptr; }
  std::byte* head() { return static_cast<std::byte*>(map_); }
  std::size_t head_bytes() const { return head_; }
  int fd() const { return fd_.get(); }
  // Frees the on-demand anonymous buffer of tier mode (after a restore that used it).
  void release_anonymous();

 private:
  template <class T>
  struct PageAligned {
    using value_type = T;
    PageAligned() = default;
    template <class U>
    PageAligned(const PageAligned<U>&) {}
    T* allocate(std::size_t n);
    void deallocate(T* p, std::size_t) noexcept;
    friend bool operator==(const PageAligned&, const PageAligned&) { return true; }
  };

  bool file_backed_ = false;
  std::size_t size_ = 0;
  std::vector<std::byte, PageAligned<std::byte>> anonymous_;
  Fd fd_;
  void* map_ = nullptr;
  std::size_t map_bytes_ = 0, head_ = 0;
};

}  // namespace trainrt::checkpoint
