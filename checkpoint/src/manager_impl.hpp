#pragma once
// Manager's state, shared by its units: manager.cpp (registration, save()), commit.cpp (writing a
// shard, the commit protocol, retention) and restore.cpp (choosing and loading a step).
#include <chrono>
#include <cstdlib>
#include <future>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "device_copy.hpp"
#include "files.hpp"
#include "reshard.hpp"
#include "shard_format.hpp"
#include "trainrt/checkpoint/manager.hpp"
#include "trainrt/runtime/communicator.hpp"

namespace trainrt::checkpoint {

using Clock = std::chrono::steady_clock;

inline std::size_t align_up(std::size_t n, std::size_t a) { return (n + a - 1) / a * a; }

struct Entry {
  std::string name;
  void* data = nullptr;                 // buffers; null for blobs
  std::vector<std::uint8_t>* blob = nullptr;
  std::size_t bytes = 0;                // buffers: fixed; blobs: at save time
  DType dtype = DType::F32;
  std::vector<std::int64_t> shape;
  Sharding sharding = Sharding::PerRank;
  std::size_t staging_offset = 0;       // host buffers only
  void* pinned = nullptr;               // device buffers: their pinned host staging
  void* stream = nullptr;               // device buffers: the user's stream (null: the whole device)
  std::optional<format::Sharded> shard;  // Sharding::Sharded: where the chunk sits
};

// Staging starts and ends on kDirectAlign boundaries, so the shard writer hands it to O_DIRECT in
// one piece.
constexpr std::size_t kPage = kDirectAlign;
template <class T>
struct PageAligned {
  using value_type = T;
  PageAligned() = default;
  template <class U>
  PageAligned(const PageAligned<U>&) {}
  T* allocate(std::size_t n) {
    void* p = std::aligned_alloc(kPage, align_up(std::max<std::size_t>(n * sizeof(T), 1), kPage));
    if (!p) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, std::size_t) { std::free(p); }
  friend bool operator==(const PageAligned&, const PageAligned&) { return true; }
};

// Bootstrap messages are JSON; serialising one never throws on bytes that are not UTF-8 (error
// texts carry paths), or a rank would leave the others waiting in a collective.
bootstrap::Blob to_blob(const nlohmann::json& j);
nlohmann::json from_blob(const bootstrap::Blob& b);

struct Manager::Impl {
  bootstrap::Session& session;
  Options opts;
  Dir root;  // the checkpoint directory, opened once: every file is reached through it
  std::vector<Entry> entries;
  std::vector<std::byte, PageAligned<std::byte>> staging;  // host buffers, reused by every save; whole pages
  std::size_t staging_end = 0;     // where the last host buffer ends in it
  std::size_t staged_bytes = 0;    // host and pinned staging together, against the cap
  std::vector<std::vector<std::uint8_t>> blob_staging;
  std::thread writer;
  std::shared_future<SaveResult> last;
  Metadata restored_metadata;
  // The sharded layout every rank agreed on at the last save (layout.cpp): valid while no rank
  // registered anything since, which one exchange of flags per save establishes.
  std::uint64_t registrations = 0;      // bumped by every registration on this rank
  std::uint64_t layout_checked_at = ~std::uint64_t{0};  // `registrations` when it was last agreed
  std::vector<format::TensorRecord> layout;  // every rank's chunks, per tensor
  std::unique_ptr<Communicator> own_host;    // restore's communicator when Options::host is null

  Impl(bootstrap::Session& s, Options o) : session(s), opts(std::move(o)) {}
  ~Impl() {
    for (auto& e : entries) pinned_free(e.pinned);
  }

  std::byte* staged(const Entry& e) {
    return e.pinned ? static_cast<std::byte*>(e.pinned) : staging.data() + e.staging_offset;
  }
  void log(const std::string& m) const {
    if (opts.log) opts.log(m);
  }
  void join() {
    if (writer.joinable()) writer.join();
  }

  void add_buffer(const std::string& name, void* data, std::size_t bytes, DType dtype, std::vector<std::int64_t> shape,
                  Sharding sharding, Location where, void* stream, std::optional<format::Sharded> shard);

  // ---------------------------------------------------------------- commit.cpp
  // The background half of save(): write, agree, commit, retire.
  void persist(std::uint64_t step, double stall, Clock::time_point t0, const Metadata& metadata,
               const std::shared_ptr<std::promise<SaveResult>>& promise);
  // Whether `step` is committed (rank 0's view, for all), agreeing on the sharded layout first
  // when any rank registered something since it was last agreed. Throws UsageError on every rank
  // when the chunks do not tile their tensors.
  bool committed_and_layout_agreed(std::uint64_t step);
  // "" when this process may write into the checkpoint directory, else why not (docs/checkpoint.md
  // "Other users"): it must be owned by the effective uid and not writable by others.
  std::string write_refusal() const;
  bool has_manifest(std::uint64_t step) const;
  SaveResult write_shard(std::uint64_t step, const Dir& dir, std::string& header_xxh3, nlohmann::json& fingerprints);
  void commit(std::uint64_t step, const Dir& dir, const std::vector<format::ShardRecord>& shards, const Metadata& metadata);
  void discard(std::uint64_t step);
  void retire_older_than(std::uint64_t step);

  // ---------------------------------------------------------------- restore.cpp
  // One step as this rank will read it: checked (manifest, sizes, header, entry table) before any
  // registered memory is touched.
  struct Candidate {
    struct Part {
      std::size_t entry;               // index into `entries`
      const format::ShardEntry* file;  // where it is in the shard
    };
    format::Manifest manifest;
    format::ShardReader reader;  // this rank's shard (rank 0's at another world size); unopened when not needed
    std::vector<Part> parts;
    std::vector<std::vector<std::uint8_t>> blobs;  // read blobs, handed over once every rank verified
    Metadata metadata;                             // the manifest's, for restored_metadata()
    std::unique_ptr<Reshard> reshard;              // sharded entries at another world size or split
  };
  // `wanted`: every rank's sharded registrations (layout::combine), the same on every rank.
  std::string check(std::uint64_t step, Candidate& c, const std::vector<format::TensorRecord>& wanted);
  std::uint8_t* read_target(const Entry& e, Candidate& c, std::size_t bytes);
  std::string load(Candidate& c, const std::vector<format::TensorRecord>& wanted);
  // Every rank's share of each sharded tensor's fingerprint, summed and held against the
  // manifest's; "" or the tensors whose content differs (the same answer on every rank).
  std::string check_fingerprints(Candidate& c, const std::vector<format::TensorRecord>& wanted);
  void finish(Candidate& c);
  std::string agree(const std::string& why);
  bool loads_in_place() const;
  std::int64_t restore();
};

}  // namespace trainrt::checkpoint
