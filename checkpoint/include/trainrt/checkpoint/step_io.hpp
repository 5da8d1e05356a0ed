#pragma once
// Steps written and read without a Manager, for frameworks that coordinate their own ranks
// (PyTorch DCP's storage layer, python/trainrt/dcp.py): every rank writes its shard with
// write_shard(); once all of them have (the framework's own gather says so), one process commits
// the step with commit_step(); StepReader reads entries back, each checked against its XXH3.
// The files, checksums, commit point and retention are Manager's (docs/checkpoint.md), so
// trainrt-ckpt list/verify/export read these steps as they read any other.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainrt/checkpoint/manager.hpp"
#include "trainrt/dtype.hpp"

namespace trainrt::checkpoint {

// One entry of a rank's shard, written from the caller's memory as it is (no staging copy).
struct Item {
  std::string name;
  const void* data = nullptr;
  std::size_t bytes = 0;
  std::optional<DType> dtype;  // empty: opaque bytes (a blob, at most 1 GiB)
  std::vector<std::int64_t> shape;
  bool replicated = false;
  std::optional<Shard> shard;  // a chunk of a global tensor (typed items only)
};

// What commit_step needs of each rank's shard; plain data, to travel through the framework's
// own gather.
struct WrittenShard {
  unsigned rank = 0;
  std::uint64_t bytes = 0;  // the shard file's size
  std::string header_xxh3;
  std::string chunks;  // JSON: this rank's chunks of sharded tensors and their fingerprint shares
};

// Writes and fsyncs `rank`'s shard of `step` into `directory` (created if missing, one level).
// Refuses (UsageError, before anything is written) a bad rank or world size, no items, a name
// used twice or not 1..4096 bytes of UTF-8, a size that does not match the dtype and shape, a
// chunk outside its global shape; refuses (Error) a committed step: it is never rewritten.
WrittenShard write_shard(const std::string& directory, std::uint64_t step, unsigned rank, unsigned world_size,
                         const std::vector<Item>& items);

// Removes `rank`'s files of `step` when the step is not committed (a save that failed somewhere),
// and the step's directory once it is empty. Never throws.
void discard_shard(const std::string& directory, std::uint64_t step, unsigned rank) noexcept;

// A small file committed with a step (the framework's own metadata): written and fsynced before
// the manifest, its size and XXH3 kept in the manifest's metadata under "trainrt.attachment.NAME".
struct Attachment {
  std::string name;  // [A-Za-z0-9][A-Za-z0-9._-]*, at most 64 bytes, not a name of the format
  std::string data;  // at most 256 MiB
};

struct CommitOptions {
  unsigned keep_last = 2;  // committed steps kept, as Options::keep_last
  // false: the caller retires old steps later with retire_steps() (off the commit's path: removing
  // a GiB of shards takes a quarter of a second).
  bool retire = true;
  Metadata metadata;
  std::vector<Attachment> attachments;
  std::function<void(const std::string&)> log;
};

// Commits `step` with one shard per rank 0..world_size-1 (each write_shard's result): checks the
// chunks of every sharded tensor tile it (UsageError naming the tensor and ranks otherwise, and
// nothing is committed), sums the fingerprints into the tensor table, writes the attachments,
// then the manifest (the commit point), `latest`, and (options.retire) retires old steps as
// Manager does.
void commit_step(const std::string& directory, std::uint64_t step, unsigned world_size,
                 const std::vector<WrittenShard>& shards, const CommitOptions& options);

// Keeps the newest `keep_last` committed steps up to `step` and removes older ones and older
// uncommitted leftovers (Manager's retention). Never throws; problems go to `log`.
void retire_steps(const std::string& directory, std::uint64_t step, unsigned keep_last,
                  const std::function<void(const std::string&)>& log = {}) noexcept;

struct EntryInfo {
  std::string name, kind, dtype;  // kind: buffer | blob
  std::vector<std::int64_t> shape;
  std::uint64_t bytes = 0;
  bool replicated = false;
  std::optional<Shard> shard;
};

// One committed step opened for reading. Every check is the format's own (the manifest, each
// shard's header against it, each entry's checksum); errors name the step, the rank's shard and
// the entry.
class StepReader {
 public:
  // Throws Error when `step` has no usable manifest (not committed, damaged, foreign).
  StepReader(const std::string& directory, std::uint64_t step);
  ~StepReader();
  StepReader(const StepReader&) = delete;
  StepReader& operator=(const StepReader&) = delete;

  std::uint64_t step() const;
  unsigned world_size() const;
  const Metadata& metadata() const;
  // "" when every rank's shard opens and its header agrees with the manifest (no data is read),
  // else the first problems found.
  std::string check_shards();
  EntryInfo entry(unsigned rank, const std::string& name);
  // Reads the entry into `dst`, which holds exactly its bytes, checking its XXH3 as it reads.
  void read(unsigned rank, const std::string& name, void* dst, std::size_t bytes);
  // An attachment of the step, checked against the size and XXH3 the manifest holds for it.
  std::string attachment(const std::string& name);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainrt::checkpoint
