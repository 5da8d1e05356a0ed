// Where memory tiers live when the caller names no tmpfs (docs/checkpoint.md "Memory tier"):
// kHugePageTierBase when this node has it as a tmpfs of its own, else /dev/shm. The Slurm package
// mounts it at boot with huge pages (`huge=within_size`): a restore reads a 1 GiB tier file from
// it in 71 ms where /dev/shm's 4 KiB pages take 162 ms (the 2-core VM, docs/performance.md).
#include <fmt/format.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>

#include <cerrno>
#include <cstring>

#include "trainrt/checkpoint/memory_tier.hpp"

namespace trainrt::checkpoint {

std::string tier_base_problem(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return fmt::format("{}: {}", path, std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) return fmt::format("{}: not a directory", path);
  struct statfs fs {};
  if (::statfs(path.c_str(), &fs) != 0) return fmt::format("{}: {}", path, std::strerror(errno));
  if (fs.f_type != TMPFS_MAGIC) return fmt::format("{}: not a tmpfs", path);
  if (st.st_uid != 0) return fmt::format("{}: owned by uid {}, not root", path, st.st_uid);
  // Writable by every user, as /dev/shm: then only with the sticky bit, so no user removes or
  // renames another's directory.
  if ((st.st_mode & (S_IWOTH | S_IWGRP)) && !(st.st_mode & S_ISVTX))
    return fmt::format("{}: writable by others without the sticky bit (mode {:o})", path, st.st_mode & 07777);
  return {};
}

std::string default_tier_base() {
  return tier_base_problem(kHugePageTierBase).empty() ? kHugePageTierBase : kFallbackTierBase;
}

}  // namespace trainrt::checkpoint
