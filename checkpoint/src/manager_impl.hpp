#pragma once
// Manager's state, shared by its units: manager.cpp (registration, save()), commit.cpp (writing a
// shard, the commit protocol, retention) and restore.cpp (choosing and loading a step).
#include <chrono>
#include <map>
#include <cstdlib>
#include <functional>
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
#include "staging.hpp"
#include "tier_dir.hpp"
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

// Bootstrap messages are JSON; serialising one never throws on bytes that are not UTF-8 (error
// texts carry paths), or a rank would leave the others waiting in a collective.
bootstrap::Blob to_blob(const nlohmann::json& j);
nlohmann::json from_blob(const bootstrap::Blob& b);

// A shard no node holds, rebuilt from its parity row (tier_parity.cpp): every input is one block,
// XORed into block `block` of the shard on rank `receiver`.
struct ParityRebuild {
  unsigned shard = 0, node = 0, receiver = 0;  // the saved rank, the node that lacks it, who rebuilds it
  std::uint64_t bytes = 0, block = 0;          // the shard file's bytes (manifest), one block's
  unsigned blocks = 0;                         // the shard's blocks (row members - 1)
  struct Input {
    unsigned node = 0;                         // a node that holds the file
    std::string name;                          // a shard or parity file of the step
    std::uint64_t offset = 0, size = 0;        // where the block starts; its bytes that exist (zeros after)
    unsigned block = 0;                        // which block of the shard it goes into
    std::string xxh3;                          // a parity block's checksum ("" for a shard's)
  };
  std::vector<Input> inputs;
};
// How to rebuild `shard` from the parities and shards the nodes hold (`has(node, shard)`: a
// usable copy), or nullopt with `why`.
std::optional<ParityRebuild> plan_parity_rebuild(unsigned shard, const std::vector<std::optional<tier::StepFiles>>& held,
                                                 const std::function<bool(unsigned, unsigned)>& has,
                                                 const format::Manifest& manifest, std::string& why);

struct Manager::Impl {
  bootstrap::Session& session;
  Options opts;
  Dir root;  // the checkpoint directory, opened once: every file is reached through it
  std::vector<Entry> entries;
  Staging staging;  // host buffers, reused by every save; whole pages (the tier file when the memory tier is on)
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
  std::unique_ptr<Communicator> own_host;    // restore's communicator when Options::host is null; buddy copies
  RestoreReport report;                      // of the last restore()
  // The newest step the last restore() passed over only because its per-rank state needs the world
  // size that saved it: starting fresh then would silently drop that progress, so restore() refuses.
  std::string refused_for_world_size;

  // The memory tier's state on this rank (tier_save.cpp, tier_restore.cpp).
  struct Tier {
    std::optional<tier::NodeDir> dir;  // unset: the tier is off on this rank (`off` says why)
    std::string off;
    std::string job, node;             // this rank's job and node names
    bool pending = false;              // enabled, not opened yet (ensure_tier() opens it)
    std::string file;                  // shard_name(rank): this rank's file in the tier
    // The tier step directory this rank's staging file sits in (the step it last committed or
    // restored from); unset while it is in staging/ (a save is writing it).
    std::optional<std::uint64_t> file_step;
    std::uint64_t mapped_at = ~std::uint64_t{0};  // `registrations` when the staging was mapped
  } tier;

  Impl(bootstrap::Session& s, Options o);
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

  std::shared_future<SaveResult> start_save(std::uint64_t step, Metadata metadata, bool to_disk);  // manager.cpp

  // ---------------------------------------------------------------- tier_save.cpp
  void open_tier();    // from the constructor: the names checked, or why the tier is off
  void ensure_tier();  // collective, at the first restore or save: the node directory opened
  std::string tier_identity();  // rank 0: this directory's token for this job
  void turn_tier_off(const std::string& why);
  // Before save()'s copy: the staging mapped on this rank's tier file (mapping it the first time
  // or after a registration), the file moved into staging/ out of the step it held.
  void prepare_tier_staging();
  void map_tier_staging();
  struct TierOutcome {
    bool committed = false, buddies = false;
    std::string error;  // why the step is not in the tier ("" when committed)
    double seconds = 0;
  };
  // The memory-tier half of a save or snapshot, run by the writer thread (collective).
  // `writer` is null when preparing the shard failed on this rank (`prepare_error` says why).
  TierOutcome persist_memory(std::uint64_t step, format::ShardWriter* writer, const std::string& prepare_error,
                             const nlohmann::json& fingerprints, const Metadata& metadata);
  std::string tier_off_requested;  // set by the writer thread, applied by the next save
  Communicator& transfer_comm();  // the communicator buddy copies and restores move bytes through

  void add_buffer(const std::string& name, void* data, std::size_t bytes, DType dtype, std::vector<std::int64_t> shape,
                  Sharding sharding, Location where, void* stream, std::optional<format::Sharded> shard);

  // ---------------------------------------------------------------- commit.cpp
  // The background half of save(): write, agree, commit, retire.
  // `to_disk` false: a snapshot (the memory tier only).
  void persist(std::uint64_t step, double stall, Clock::time_point t0, const Metadata& metadata,
               const std::shared_ptr<std::promise<SaveResult>>& promise, bool to_disk);
  bool tier_everywhere = false;  // every rank has the memory tier enabled (agreed at each save)
  // Whether `step` is committed (rank 0's view, for all), agreeing on the sharded layout first
  // when any rank registered something since it was last agreed. Throws UsageError on every rank
  // when the chunks do not tile their tensors.
  bool committed_and_layout_agreed(std::uint64_t step, bool to_disk);
  // "" when this process may write into the checkpoint directory, else why not (docs/checkpoint.md
  // "Other users"): it must be owned by the effective uid and not writable by others.
  std::string write_refusal() const;
  bool has_manifest(std::uint64_t step) const;
  // The shard of this save, laid out once for the memory tier and the directory (header padded to
  // the tier file's reserved pages when the staging is mapped).
  std::unique_ptr<format::ShardWriter> prepare_shard(std::uint64_t step, nlohmann::json& fingerprints);
  SaveResult write_shard(std::uint64_t step, const Dir& dir, const format::ShardWriter& w);
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
  // `base` holds the step directories: the checkpoint directory, or this node's memory tier.
  std::string check(const Dir& base, std::uint64_t step, Candidate& c, const std::vector<format::TensorRecord>& wanted);
  // Per new rank, the saved shards it reads to load `manifest` (the same answer on every rank).
  std::vector<std::vector<unsigned>> shards_needed(const format::Manifest& manifest,
                                                   const std::vector<format::TensorRecord>& wanted);
  std::uint8_t* read_target(const Entry& e, Candidate& c, std::size_t bytes);
  std::string load(Candidate& c, const std::vector<format::TensorRecord>& wanted);
  // Every rank's share of each sharded tensor's fingerprint, summed and held against the
  // manifest's; "" or the tensors whose content differs (the same answer on every rank).
  std::string check_fingerprints(Candidate& c, const std::vector<format::TensorRecord>& wanted);
  void finish(Candidate& c);
  std::string agree(const std::string& why);
  bool loads_in_place() const;
  std::int64_t restore();

  // ---------------------------------------------------------------- tier_restore.cpp
  // What every node's memory tier holds, gathered from every rank (the same on every rank).
  struct Holdings {
    std::vector<std::string> nodes;           // distinct node names, in the order of their first rank
    std::vector<unsigned> node_of;            // per rank: index into `nodes`
    std::vector<unsigned> leader;             // per node: its lowest rank
    std::vector<std::string> off;             // per rank: why its tier is off ("" when on)
    // per step: per node, what it holds of that step (nullopt: nothing)
    std::map<std::uint64_t, std::vector<std::optional<tier::StepFiles>>> steps;
    std::vector<std::string> notes;           // things the inventories skipped, "node: note"
  };
  // Parity groups instead of buddy copies (tier_parity.cpp): this rank's parity of `step`
  // (collective; "" or this rank's problem), and the rebuild of shards no node holds.
  std::string persist_parity(std::uint64_t step, const std::vector<unsigned>& node_of,
                             const std::vector<format::ShardRecord>& shards);
  std::string run_parity_rebuilds(std::uint64_t step, const Holdings& h, const std::vector<ParityRebuild>& plans);
  nlohmann::json tier_listing();  // this rank's part of restore()'s exchange
  Holdings parse_holdings(const std::vector<bootstrap::Blob>& gathered);
  // Tries `step` from memory (collective): "" when it is loaded and verified on every rank, else
  // why not (the same on every rank). `c` is left as load() left it; finish() is the caller's.
  // `touched`: the registered buffers were read into.
  std::string restore_from_memory(std::uint64_t step, Holdings& h, Candidate& c,
                                  const std::vector<format::TensorRecord>& wanted, bool& touched);
  // After any restore: the staging mapped again on this rank's tier file (in `memory_step`'s
  // directory when it was restored from memory), so the first save's stall is a plain copy.
  void after_restore(std::optional<std::uint64_t> memory_step);
};

}  // namespace trainrt::checkpoint
