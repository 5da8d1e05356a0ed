#pragma once
// Removing memory tiers (docs/checkpoint.md "Memory tier"): a job's tier lives in a tmpfs of each
// node under <base>/trainrt-<uid>/job-<job>/ and must not outlive the job. train.sbatch removes its
// own at the end (trainrt-ckpt tier-clean --job); an epilog can do the same; and each job removes
// what earlier jobs of the same user left behind once Slurm says those jobs are over (a job killed
// with its batch script, a node that ran no epilog). Only this user's directories are touched,
// nothing is followed, and a node directory a live manager holds (its lock) is never removed.
#include <functional>
#include <string>
#include <vector>

namespace trainrt::checkpoint {

// The tmpfs a node's tiers live in when none is named: kHugePageTierBase where it is a tmpfs of
// its own (root's; writable by all only with the sticky bit), mounted with huge pages by the
// Slurm package's boot unit (docs/checkpoint.md "Memory tier"), else kFallbackTierBase.
inline constexpr const char* kHugePageTierBase = "/run/trainrt";
inline constexpr const char* kFallbackTierBase = "/dev/shm";
std::string default_tier_base();
// Why `path` is no tier base ("" when it is one): missing, a symlink, not a directory, not a
// tmpfs mounted there (a folder inside another tmpfs is not one), not root's, or writable by
// others without the sticky bit.
std::string tier_base_problem(const std::string& path);
// The same rules on what lstat and statfs said of `path`.
struct TierBaseFacts {
  bool directory = false, tmpfs = false, own_mount = false;
  unsigned uid = 0, mode = 0;
};
std::string judge_tier_base(const std::string& path, const TierBaseFacts& facts);

// Removes this user's memory tier of `job` under `base` on this machine. One line per thing done
// or left (in use, not ours). Throws UsageError for a job that is not a file name.
std::vector<std::string> remove_memory_tier(const std::string& base, const std::string& job);

// Removes this user's memory tiers of every job but `keep` for which `finished(job)` is true.
std::vector<std::string> remove_finished_memory_tiers(const std::string& base, const std::string& keep,
                                                      const std::function<bool(const std::string&)>& finished);

}  // namespace trainrt::checkpoint
