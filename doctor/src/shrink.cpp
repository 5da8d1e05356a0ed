#include "trainrt/doctor/shrink.hpp"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "trainrt/access_error.hpp"
#include "trainrt/checkpoint/inspect.hpp"
#include "trainrt/error.hpp"

namespace trainrt::doctor {

ShrinkCheck check_shrink(const std::string& ckpt_dir) {
  ShrinkCheck c;
  // Only a directory that is not there is "no checkpoint": one this user may not look at (a parent
  // without search permission answers EACCES, also behind a symlink) cannot be answered about.
  struct stat st {};
  if (::stat(ckpt_dir.c_str(), &st) != 0) {
    if (errno != ENOENT)
      throw CheckpointError(fmt::format("cannot look at the checkpoint directory: {}", std::strerror(errno)), ckpt_dir);
    c.message = "no checkpoint directory: a rerun starts from step 0 at any world size";
    return c;
  }
  checkpoint::InspectOptions o;
  o.check_data = false;
  for (const auto& r : checkpoint::inspect(ckpt_dir, o)) {  // newest first
    // A newer step this user cannot read may be the one the rerun restores: no answer.
    for (const auto& p : r.problems())
      if (reports_access_error(p)) throw CheckpointError(fmt::format("step {}: {}", r.step, p), ckpt_dir);
    if (!r.intact()) continue;
    c.step = r.step;
    c.world_size = r.world_size;
    for (const auto& s : r.shards)
      for (const auto& e : s.entries)
        if (!e.replicated && !e.sharded) {  // sharded tensors are resharded on restore
          ++c.sharded_count;
          if (c.sharded.size() < 8 && std::find(c.sharded.begin(), c.sharded.end(), e.name) == c.sharded.end())
            c.sharded.push_back(e.name);
        }
    break;
  }
  if (!c.step) {
    c.message = "no committed step: a rerun starts from step 0 at any world size";
    return c;
  }
  if (c.sharded_count == 0) {
    c.message = fmt::format("step {} holds replicated state and sharded tensors only: a smaller world can restore it",
                            *c.step);
    return c;
  }
  c.can_shrink = false;
  std::string names;
  for (const auto& n : c.sharded) names += (names.empty() ? "" : ", ") + n;
  c.message = fmt::format("step {} holds per-rank state ({}{}; {} entries over all shards) saved by {} ranks: only {} "
                          "ranks can restore it, so the world cannot shrink (a chunk of a global tensor registered "
                          "with a Shard would reshard)",
                          *c.step, names, c.sharded_count > c.sharded.size() ? ", ..." : "", c.sharded_count,
                          c.world_size, c.world_size);
  return c;
}

}  // namespace trainrt::doctor
