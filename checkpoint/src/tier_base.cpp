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

std::string judge_tier_base(const std::string& path, const TierBaseFacts& f) {
  if (!f.directory) return fmt::format("{}: not a directory", path);
  if (!f.tmpfs) return fmt::format("{}: not a tmpfs", path);
  // A folder left in /run (itself a tmpfs) by a mount that failed is no tier base: tiers would
  // fill /run.
  if (!f.own_mount) return fmt::format("{}: not a mount of its own", path);
  if (f.uid != 0) return fmt::format("{}: owned by uid {}, not root", path, f.uid);
  // Writable by every user, as /dev/shm: then only with the sticky bit, so no user removes or
  // renames another's directory.
  if ((f.mode & (S_IWOTH | S_IWGRP)) && !(f.mode & S_ISVTX))
    return fmt::format("{}: writable by others without the sticky bit (mode {:o})", path, f.mode & 07777);
  return {};
}

std::string tier_base_problem(const std::string& path) {
  struct stat st {}, parent {};
  if (::lstat(path.c_str(), &st) != 0) return fmt::format("{}: {}", path, std::strerror(errno));
  TierBaseFacts f;
  f.directory = S_ISDIR(st.st_mode);  // lstat: a symlink is not one
  f.uid = st.st_uid;
  f.mode = st.st_mode;
  if (f.directory) {
    struct statfs fs {};
    if (::statfs(path.c_str(), &fs) != 0) return fmt::format("{}: {}", path, std::strerror(errno));
    f.tmpfs = fs.f_type == TMPFS_MAGIC;
    if (::lstat((path + "/..").c_str(), &parent) != 0) return fmt::format("{}/..: {}", path, std::strerror(errno));
    f.own_mount = parent.st_dev != st.st_dev;
  }
  return judge_tier_base(path, f);
}

std::string default_tier_base() {
  return tier_base_problem(kHugePageTierBase).empty() ? kHugePageTierBase : kFallbackTierBase;
}

}  // namespace trainrt::checkpoint
