#pragma once
// Looking at a checkpoint directory without a job: which steps exist, which are committed, what
// they hold, and whether every byte still matches its checksum. Used by `trainrt-ckpt`.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "trainrt/checkpoint/manager.hpp"

namespace trainrt::checkpoint {

struct EntryReport {
  std::string name, kind, dtype;
  std::vector<std::int64_t> shape;
  std::uint64_t bytes = 0;
  bool replicated = false;
  bool sharded = false;  // a chunk of a global tensor (format 2): restorable at any world size
  std::string problem;  // empty when its checksum matched (or data was not read)
};

struct ShardReport {
  unsigned rank = 0;
  std::string file;
  std::uint64_t bytes = 0;
  std::string problem;  // opening/header problems; entry problems sit in `entries`
  std::vector<EntryReport> entries;
};

// A sharded global tensor of a format-2 step: its chunks tile it (read_manifest checks that), and
// with data checked, the fingerprint of its chunks as read matches the saved one.
struct TensorReport {
  std::string name, dtype;
  std::vector<std::int64_t> global_shape;
  std::size_t chunks = 0;
  std::uint64_t bytes = 0;
  std::string problem;
};

struct StepReport {
  std::uint64_t step = 0;
  bool committed = false;  // has a MANIFEST.json (the commit point); it may still be unusable
  bool data_checked = false;
  unsigned world_size = 0;
  Metadata metadata;
  std::string problem;  // why it is not committed, or why its manifest is unusable
  std::vector<ShardReport> shards;
  std::vector<TensorReport> tensors;
  std::uint64_t unchecked_shards = 0;  // not opened once kMaxProblemShards had problems
  std::uint64_t bytes() const;
  // Committed with a usable manifest, every shard opens and agrees with it (step, rank, world
  // size, at least one entry), and (when data was checked) every entry matched its checksum:
  // exactly what restore requires of a step before its job's own entries are looked at.
  bool intact() const;
  std::vector<std::string> problems() const;  // every problem, each naming its shard and entry
};

struct InspectOptions {
  bool check_data = true;             // read every entry and compare checksums
  std::optional<std::uint64_t> step;  // only this step
  std::function<void(const std::string&)> progress;
};

// A step stops being checked after this many shards with problems: it is not intact either way.
constexpr std::size_t kMaxProblemShards = 16;

// Steps newest first. Throws trainrt::Error when `directory` cannot be read (or is a symlink: it
// is never followed). Reading another user's directory is allowed: nothing in it is followed,
// blocked on, or believed beyond the format's limits.
std::vector<StepReport> inspect(const std::string& directory, const InspectOptions& options = {});
// The step the `latest` pointer names; nullopt when there is none or it is unreadable.
std::optional<std::uint64_t> latest_step(const std::string& directory);

// Writes sharded tensor `name` of `step` (the newest committed step holding it when absent) as
// one NumPy array (.npy, row-major; bf16 as its raw bits, '<u2') at `output`, assembled from the
// chunks of any world size in bounded memory: every chunk's checksum and the tensor's
// fingerprint are checked, and `output` appears (by rename, never over an existing file) only
// when all held. Returns the step used; throws trainrt::Error naming what is wrong.
std::uint64_t export_tensor(const std::string& directory, const std::string& name, std::optional<std::uint64_t> step,
                            const std::string& output, const std::function<void(const std::string&)>& progress = {});

}  // namespace trainrt::checkpoint
