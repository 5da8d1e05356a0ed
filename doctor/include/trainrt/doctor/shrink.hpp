#pragma once
// Whether a rerun on fewer nodes can restore a run's checkpoint: replicated state and sharded
// tensors (chunks of a global tensor) restore at another world size, per-rank state does not
// (checkpoint/manager.hpp). train.sbatch asks before it excludes a node, so per-rank state is
// reported instead of failing the rerun at restore.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace trainrt::doctor {

struct ShrinkCheck {
  bool can_shrink = true;             // no checkpoint, or the newest usable one holds no per-rank state
  std::optional<std::uint64_t> step;  // the step a rerun would restore (newest committed + intact)
  unsigned world_size = 0;            // the ranks that saved it
  std::vector<std::string> sharded;   // per-rank entry names (the first 8)
  std::size_t sharded_count = 0;
  std::string message;                // one line saying which and why
};

// Reads headers only (no checksums): fast enough to run between two srun steps. Throws
// trainrt::Error when the directory cannot be looked at (anything but "does not exist"), cannot be
// read, or holds a step newer than the one chosen that this user is refused (a permission or I/O
// error is never taken for "no step").
ShrinkCheck check_shrink(const std::string& ckpt_dir);

}  // namespace trainrt::doctor
