#pragma once
// Fault-tolerant checkpoints: save() stalls training only while registered state is copied into
// reused staging buffers; a background thread writes this rank's shard and fsyncs it; the ranks
// agree through the bootstrap; rank 0 commits atomically (manifest, then the `latest` pointer, each
// written to a temporary name, fsynced, renamed, directory fsynced). Older steps are deleted only
// after a newer commit. restore() takes the newest step every rank can verify, and reports every
// step it skipped and why. Format: docs/checkpoint.md (versioned, no pickle).
#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "trainrt/bootstrap/session.hpp"
#include "trainrt/dtype.hpp"
#include "trainrt/error.hpp"
#include "trainrt/memory.hpp"

namespace trainrt {
class Communicator;
}

namespace trainrt::checkpoint {

// The memory tier (docs/checkpoint.md "Memory tier"): every save() and snapshot() also keeps this
// rank's shard in a tmpfs file on its node, under <base>/trainrt-<uid>/job-<job>/<node>/ (0700,
// never through a symlink, removed when the job ends), and copies it to a buddy rank on another
// node through a host communicator of the manager's own. restore() tries the newest step every
// rank can get verified from memory (its node's copy, else a buddy's) before the directory.
struct MemoryTier {
  bool enabled = false;
  std::string base;               // a tmpfs on each node; "": default_tier_base() (memory_tier.hpp)
  std::string job;                // "": $SLURM_JOB_ID (the tier outlives a step, not the job)
  std::string node;               // "": $SLURMD_NODENAME, else the host name; ranks that share it share the tier
  bool buddies = true;            // copy every shard to a rank on another node (none with one node)
  // 2 or more: parity over groups of that many nodes instead of buddy copies (host memory per
  // node S (1 + 1/(g-1)) instead of 2 S; one lost node per group rebuilt). 0: buddy copies.
  unsigned parity_group = 0;
};

struct Options {
  // Created if missing (one level). Opened once, never through a symlink at its last component;
  // saving needs it owned by this user and not writable by others (restore reads any readable
  // one). docs/checkpoint.md "Hostile inputs and other users".
  std::string directory;
  unsigned keep_last = 2;                // committed steps kept (at least the newest one)
  std::size_t staging_cap_bytes = std::size_t{8} << 30;  // refuse to register more than this
  std::function<void(const std::string&)> log;           // progress and skipped-step reports
  // restore() reads host buffers in place and verifies as it reads: one copy, as fast as reading
  // the files. A step that then fails its checksums on some rank has already overwritten part of
  // them; an older step that verifies overwrites them again, and when none does restore() throws
  // instead of returning -1. true: read into staging and copy only once every rank has verified
  // (the buffers are never touched by a bad step; restore costs one more copy).
  bool verify_before_load = false;
  // Restoring sharded state at another world size or split moves chunks between ranks through a
  // host communicator: this one when given (restore() then issues collectives on it, so nothing
  // else may use it meanwhile), else one the manager opens for that restore alone.
  Communicator* host = nullptr;
  // The bytes a rank holds in flight while resharding (received pieces; plus two pieces of at most
  // transfer_bytes / world size for reading and sending).
  std::size_t transfer_bytes = std::size_t{64} << 20;
  MemoryTier memory_tier;
};

struct SaveResult {
  std::uint64_t step = 0;
  double stall_seconds = 0;    // time save() blocked the caller (the copy into staging)
  double persist_seconds = 0;  // write + fsync + agreement + commit, in the background
  std::uint64_t shard_bytes = 0;
  // The step was committed before this save (a stop signal right after a periodic save or a
  // restore): nothing was written, the committed step and its metadata stay as they are.
  bool already_committed = false;
  // Memory tier: every rank's shard is in its node's tier (a same-node restart restores it without
  // the disk), and, with buddy_protected, a copy of it on another node too (a lost node too).
  bool in_memory = false;
  bool buddy_protected = false;
  double memory_seconds = 0;  // writing the tier copy, agreeing, the buddy copies (background)
};

// One part of a restore() call. Each begins where the one before it ended, so in order they add up
// to RestoreReport::seconds when a step was restored (when none was, seconds also holds the call's
// end after the last candidate). name: "find" (waiting for a save in flight, listing the directory and
// the memory tier, every rank's view exchanged), "memory tier" (a step from the tiers: copies
// between nodes and parity included), "check" (the step's manifest and shard headers against what
// this job registered), "read" (the shards read and their checksums verified; sharded state moved
// between ranks), "fingerprint" (sharded tensors' content against the manifest), "install" (staging
// into the registered buffers: the host-to-device copies). Every phase but find names its step; a
// phase of a step that failed is kept, and the next candidate's phases follow it.
struct RestorePhase {
  std::string name;
  std::int64_t step = -1;  // -1 for find
  double seconds = 0;
};

// What the last restore() did: the step, where it came from, every fallback with its reason, and
// where its time went.
struct RestoreReport {
  std::int64_t step = -1;
  std::string source;            // "memory" or "disk" ("" when nothing was restored)
  unsigned local_copies = 0;     // memory: shards this rank read that were on its node already
  unsigned moved_copies = 0;     // memory: shards this rank received from another node (buddy copies)
  unsigned job_moved_copies = 0;  // memory: shards copied between nodes in the whole job
  std::uint64_t job_moved_bytes = 0;
  unsigned job_rebuilt_shards = 0;  // memory: shards rebuilt from parity in the whole job
  double seconds = 0;            // the whole restore() call
  std::vector<std::string> fallbacks;  // "memory tier step 40: rank 3: ...; falling back to ..."
  std::vector<RestorePhase> phases;    // in the order they ran
};

// Free-form key/value pairs stored in a step's manifest (rank 0's are kept): loss, data epoch,
// code version, ...
using Metadata = std::map<std::string, std::string>;

// Replicated state (e.g. data-parallel weights) may be restored by any world size; per-rank state
// only by the world size that saved it; sharded state (a chunk of a global tensor, registered
// with a Shard) by any world size and any split of the same global tensor.
enum class Sharding { PerRank, Replicated, Sharded };

// This rank's chunk of a global tensor: the registered buffer holds the elements at `offsets`
// (one per dimension) of a tensor of `global_shape`, row-major in the buffer's own shape. Chunks
// may be uneven; a rank without a chunk registers an empty one (a size of 0) or nothing. save()
// checks across ranks that the chunks of each name tile the tensor exactly; restore() reassembles
// any other split and checks the content against the tensor's fingerprint (docs/checkpoint.md
// "Sharded tensors").
struct Shard {
  std::vector<std::int64_t> global_shape;
  std::vector<std::int64_t> offsets;
};

// Where a registered buffer lives (Location::Host is Memory::Host: the older spelling stays for
// callers). Device buffers are staged through pinned host memory (cudaMallocHost, allocated at
// registration): the save stall is their device-to-host copy.
using Location = Memory;

class Manager {
 public:
  Manager(bootstrap::Session& session, Options options);
  ~Manager();  // waits for a save in flight
  Manager(const Manager&) = delete;
  Manager& operator=(const Manager&) = delete;

  // `data` is host memory, or device memory with Location::Device (a CUDA build is needed then).
  // Device buffers: `stream` is the cudaStream_t that writes and reads the buffer; save() and
  // restore() order their copies after the work enqueued on it so far (null: after the whole
  // device). Misuse (a name twice, a size that is not whole elements, Sharding::Sharded without
  // a Shard) is a UsageError.
  void register_buffer(const std::string& name, void* data, std::size_t bytes, DType dtype,
                       std::vector<std::int64_t> shape, Sharding sharding = Sharding::PerRank,
                       Location where = Location::Host, void* stream = nullptr);
  // A chunk of a global tensor: `shape` is the chunk's (bytes must be exactly its elements), and
  // it must lie inside `shard.global_shape` at `shard.offsets` (a UsageError otherwise).
  void register_buffer(const std::string& name, void* data, std::size_t bytes, DType dtype,
                       std::vector<std::int64_t> shape, const Shard& shard, Location where = Location::Host,
                       void* stream = nullptr);
  // Opaque bytes owned by the caller (RNG state, data position, ...): saved as they are at save()
  // time; restore() resizes and fills the vector.
  void register_blob(const std::string& name, std::vector<std::uint8_t>* blob, Sharding sharding = Sharding::PerRank);

  // Returns once the state is staged; the future completes when the step is committed on every
  // rank, or throws trainrt::Error (then no commit happened and earlier checkpoints are intact).
  // A step that is already committed is never rewritten (see SaveResult::already_committed).
  // Throws at once for a step above 2^63-1, metadata that is not UTF-8 or over 1 MiB, or a blob
  // over 1 GiB (what readers would refuse is never written). When the sharded chunks of a name do
  // not tile their global tensor (overlap, gap, outside it, or ranks disagree on its dtype or
  // global shape), the future throws UsageError on every rank naming the tensor and the ranks,
  // and nothing is written.
  std::shared_future<SaveResult> save(std::uint64_t step, Metadata metadata = {});
  // The memory tier only (no checkpoint directory write): cheap enough for every few steps. The
  // same stall and agreement as save(); the future throws when any rank's tier copy failed. A
  // UsageError when the memory tier is not enabled.
  std::shared_future<SaveResult> snapshot(std::uint64_t step, Metadata metadata = {});
  // Newest step verified on every rank, loaded into the registered buffers; -1 when none is
  // usable (the buffers untouched). Throws trainrt::Error when none is usable but a step that
  // failed its checksums was already read into the buffers (see Options::verify_before_load),
  // and when a step was passed over only because its per-rank state needs the world size that
  // saved it (starting fresh would drop that progress).
  // With the memory tier on, it returns before the tier file the next capture stages into is
  // mapped: that finishes in the background (wait_idle() waits for it; a capture joins it).
  std::int64_t restore();
  // The metadata saved with the step restore() last returned (empty before, or when none).
  const Metadata& restored_metadata() const;
  const RestoreReport& last_restore() const;
  // "" when the memory tier is in use on this rank, else why not (disabled, or the reason it was
  // turned off: a directory of another user, no job id, ...).
  const std::string& memory_tier_off() const;

  // The future of save() completes at the commit; rank 0 then removes steps beyond keep_last in
  // the background. This waits for that too (the destructor and save_and_exit() do), and for
  // the memory tier's mapping that restore() leaves to the background.
  void wait_idle();

  const std::string& directory() const;
  bootstrap::Session& session() const;  // the world this manager saves for

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Waits, with every rank of `peers` at once, until every rank's `save` is done (an invalid future:
// none in flight on this rank). The commit's own agreement runs over the bootstrap session, whose
// fence waits for a rank that died until its timeout or Slurm's KillWait; here the ranks also agree
// every 100 ms through `peers` whether each save is done, so a dead peer fails that allreduce and
// its error (a PeerError-kind failure) is thrown at once. `each_round`, when given, runs before
// every agreement (a watchdog's heartbeat); when it returns true this rank counts as done whatever
// its save (a time limit), and every rank still leaves at the same round. A collective call: nothing
// else may use `peers` meanwhile. It does not take the save's result: call get() after.
void wait_with_peers(const std::shared_future<SaveResult>& save, Communicator& peers,
                     const std::function<bool()>& each_round = {});

// restore() found steps, but every one it could use holds per-rank state saved by another world
// size: training from scratch would drop their progress (kWorldSizeExitCode for a trainer).
class WorldSizeError : public CheckpointError {
 public:
  using CheckpointError::CheckpointError;
};

}  // namespace trainrt::checkpoint

// The stop-signal helpers (stop_signals.hpp, namespace trainrt) under the names they first had here.
#include "trainrt/checkpoint/stop_signals.hpp"

namespace trainrt::checkpoint {
using trainrt::install_stop_signals;
using trainrt::kRequeueExitCode;
using trainrt::kWorldSizeExitCode;
using trainrt::save_and_exit;
using trainrt::should_stop;
using trainrt::stop_signal;
}  // namespace trainrt::checkpoint
