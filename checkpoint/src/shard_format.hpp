#pragma once
// The on-disk format (docs/checkpoint.md, version 2; version 1 still reads), written and read in one place: step
// directory names, the manifest, the `latest` pointer, and shards (ShardWriter next to
// ShardReader). Everything read is validated before it is used: sizes are capped, numbers are
// range-checked, offsets are overflow-safe, and a shard's header must agree with the manifest.
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "files.hpp"
#include "trainrt/fd.hpp"
#include "xxh3.hpp"
#include "trainrt/checkpoint/manager.hpp"

namespace trainrt::checkpoint::format {

constexpr char kMagic[8] = {'T', 'R', 'T', 'S', 'H', 'R', 'D', '1'};
constexpr std::uint32_t kVersion = 2;        // what writers write
constexpr std::uint32_t kOldestVersion = 1;  // the oldest readers accept (no sharded entries)
constexpr std::size_t kDataAlign = 4096;

// Limits on what a file may claim (docs/checkpoint.md "Limits"): nothing read from a file
// allocates or loops beyond them.
constexpr std::size_t kMaxManifestBytes = std::size_t{16} << 20;
constexpr std::size_t kMaxHeaderBytes = std::size_t{16} << 20;
constexpr std::size_t kMaxLatestBytes = 64;
constexpr std::size_t kMaxMetadataBytes = std::size_t{1} << 20;  // keys and values together
constexpr unsigned kMaxWorldSize = 1u << 20;
constexpr std::size_t kMaxEntries = std::size_t{1} << 20;
constexpr std::size_t kMaxNameBytes = 4096;
constexpr std::size_t kMaxDims = 32;
constexpr std::size_t kMaxChunks = std::size_t{1} << 22;  // chunk records in a manifest, all tensors together
constexpr unsigned kMaxJsonDepth = 8;
constexpr std::uint64_t kMaxShardBytes = std::uint64_t{4} << 40;  // 4 TiB per rank
constexpr std::uint64_t kMaxBlobBytes = std::uint64_t{1} << 30;
constexpr std::uint64_t kMaxStep = (std::uint64_t{1} << 63) - 1;  // restore() returns it as int64
// A shard larger than this whose allocated blocks cover less than 1/kSparseRatio of its size is
// refused as sparse: trainrt writes every byte, and reading terabytes of holes is how a crafted
// file would make a check run for hours.
constexpr std::uint64_t kSparseCheckAbove = std::uint64_t{1} << 30;
constexpr std::uint64_t kSparseRatio = 16;

inline constexpr const char* kManifestName = "MANIFEST.json";
inline constexpr const char* kLatestName = "latest";

// The one grammar of step directory names: "step_" and the step zero-padded to 12 digits (more
// digits only when the step needs them). Anything else (step_5, step_0000000000005,
// step_000000000005x, a step above kMaxStep) is not a step directory.
std::string step_dir_name(std::uint64_t step);
std::optional<std::uint64_t> parse_step_dir_name(std::string_view name);
std::string shard_name(unsigned rank);
// `latest` holds exactly step_dir_name(step) and a newline.
std::string latest_text(std::uint64_t step);
std::optional<std::uint64_t> parse_latest(std::string_view text);

// Steps whose directory (a real directory, not a symlink) has a name in the grammar; newest first.
std::vector<std::uint64_t> list_steps(const Dir& root);

bool valid_utf8(std::string_view s);

struct ShardRecord {  // one shard as the manifest commits it
  unsigned rank = 0;
  std::string file;
  std::uint64_t bytes = 0;
  std::string header_xxh3;  // empty in manifests written before it existed
};

// Where a sharded entry's chunk sits in its global tensor (the chunk's shape is the entry's).
struct Sharded {
  std::vector<std::int64_t> global_shape;
  std::vector<std::int64_t> offsets;
  bool operator==(const Sharded&) const = default;
};

struct ChunkRecord {  // one rank's chunk of a global tensor, as the manifest lists it
  unsigned rank = 0;
  std::vector<std::int64_t> offsets;
  std::vector<std::int64_t> shape;
};

struct TensorRecord {  // a sharded global tensor (format 2)
  std::string name;
  std::string dtype;
  std::vector<std::int64_t> global_shape;
  std::string fingerprint;  // fingerprint.hpp, 16 lowercase hex digits
  std::vector<ChunkRecord> chunks;  // tile the global shape exactly (checked on reading)
};

struct Manifest {
  std::uint64_t step = 0;
  unsigned format = kVersion;
  unsigned world_size = 0;
  Metadata metadata;
  std::vector<ShardRecord> shards;  // exactly one per rank, in rank order
  std::vector<TensorRecord> tensors;  // each one's chunks in rank order
  const ShardRecord* shard_of(unsigned rank) const { return rank < shards.size() ? &shards[rank] : nullptr; }
  const TensorRecord* tensor(const std::string& name) const;
  // The chunk `rank` holds of `t`, or null.
  const ChunkRecord* chunk_of(const TensorRecord& t, unsigned rank) const;
  std::size_t chunks_of(unsigned rank) const;  // how many chunks `rank` holds, all tensors together
  void index();  // builds what the three lookups above use (read_manifest calls it)

 private:
  std::unordered_map<std::string, std::size_t> by_name_;
  std::vector<std::size_t> chunk_count_;
};

// "" and `out` filled, or why the step has no usable manifest. A usable manifest has a format this
// reader knows, the step of its directory, 1..kMaxWorldSize ranks and exactly one shard record per
// rank, each naming shard_name(rank); format 2 adds a tensor table whose chunks (at most one per
// rank and tensor, ranks below world_size) tile each tensor exactly.
std::string read_manifest(const Dir& step_dir, std::uint64_t step, Manifest& out);
std::string manifest_text(std::uint64_t step, unsigned world_size, const std::vector<ShardRecord>& shards,
                          const Metadata& metadata, const std::vector<TensorRecord>& tensors = {});
// "" or why `metadata` cannot be stored (not UTF-8, larger than kMaxMetadataBytes).
std::string check_metadata(const Metadata& metadata);

struct ShardEntry {
  std::string name;
  std::string kind;  // buffer | blob
  std::string dtype;
  std::vector<std::int64_t> shape;
  std::uint64_t offset = 0;  // in the file
  std::uint64_t bytes = 0;
  std::string checksum;      // XXH3-64, 16 lowercase hex digits
  bool replicated = false;
  std::optional<Sharded> sharded;  // a chunk of a global tensor (format 2)
};

// Builds one shard: the data region `region` (entries placed inside it at their own offsets),
// then appended entries, each 64-byte aligned, then the header page in front of all of it.
class ShardWriter {
 public:
  ShardWriter(std::uint64_t step, unsigned rank, unsigned world_size, const void* region, std::size_t region_bytes);
  // An entry whose bytes already sit in the region at `offset`.
  void place(const std::string& name, bool blob, DType dtype, const std::vector<std::int64_t>& shape, bool replicated,
             std::size_t offset, std::size_t bytes, const std::optional<Sharded>& sharded = {});
  // An entry written after the region (and after earlier appended entries).
  void append(const std::string& name, bool blob, DType dtype, const std::vector<std::int64_t>& shape, bool replicated,
              const void* data, std::size_t bytes, const std::optional<Sharded>& sharded = {});
  // The pieces of the file in order (valid while this writer and the data live). `head_bytes`, when
  // not 0, is the exact size of the header page(s) (a multiple of kDataAlign, at least
  // header_bound() of these entries); an Error when the header does not fit.
  const std::vector<Piece>& finish(std::size_t head_bytes = 0);
  // The header bytes (whole pages) any shard of these entries needs, whatever its step, offsets,
  // sizes and checksums: name, kind, dtype, shape, replicated and sharded are what count.
  static std::size_t header_bound(std::vector<ShardEntry> entries);
  const std::vector<std::uint8_t>& head() const { return head_; }
  const std::vector<Piece>& pieces() const { return pieces_; }
  // Where the appended entries go (after the region), for writing them into an existing file.
  const std::vector<Piece>& tail() const { return tail_; }
  const std::string& header_xxh3() const { return header_xxh3_; }
  std::uint64_t file_bytes() const { return file_bytes_; }

 private:
  void add(const std::string& name, bool blob, DType dtype, const std::vector<std::int64_t>& shape, bool replicated,
           const void* data, std::size_t offset, std::size_t bytes, const std::optional<Sharded>& sharded);
  static std::string header_text(const std::vector<ShardEntry>& entries, std::uint64_t step, unsigned rank,
                                 unsigned world_size);
  std::uint64_t step_;
  unsigned rank_, world_size_;
  const void* region_;
  std::size_t region_bytes_, end_;
  std::vector<ShardEntry> written_;
  std::vector<Piece> tail_, pieces_;
  std::vector<std::uint8_t> head_;
  std::string header_xxh3_;
  std::uint64_t file_bytes_ = 0;
};

class ShardReader {
 public:
  // "" or the problem: cannot open / not a regular file, size not as committed, beyond the limits
  // or sparse, no magic, header out of bounds or larger than kMaxHeaderBytes, header not matching
  // the manifest's checksum, corrupt JSON, a step/rank/world size/format other than the
  // manifest's, no entries, a duplicate name, an entry running past the end.
  std::string open(const Dir& step_dir, const Manifest& manifest, const ShardRecord& record);
  const std::string& name() const { return name_; }
  std::uint64_t file_size() const { return size_; }
  const std::vector<ShardEntry>& entries() const { return entries_; }
  const ShardEntry* find(const std::string& entry_name) const;
  // Reads the entry into `dst` (its full size), hashing each 1 MiB piece while it is in cache;
  // "" or the problem. With `reuse_piece`, every piece lands in dst's first 1 MiB (checking only).
  // `seen(offset, data, n)`, when given, sees every piece as it is read.
  std::string read_verified(
      const ShardEntry& entry, std::uint8_t* dst, bool reuse_piece = false,
      const std::function<void(std::uint64_t, const std::uint8_t*, std::size_t)>& seen = {}) const;
  // Reads `bytes` at `offset` inside the entry into `dst`, adding them to `state` (the caller
  // resets it before the entry's first piece and compares the digest after its last); false on a
  // short read.
  bool read_piece(const ShardEntry& entry, std::uint64_t offset, std::uint8_t* dst, std::size_t bytes,
                  XXH3_state_t* state) const;
  // Asks the kernel to start reading `bytes` at `offset` inside the entry now (readahead), so the
  // next read_piece overlaps what the caller does meanwhile.
  void prefetch(const ShardEntry& entry, std::uint64_t offset, std::size_t bytes) const;

  static constexpr std::size_t kPiece = std::size_t{1} << 20;

 private:
  std::string parse_header(const std::string& text, std::uint64_t data_start, const Manifest& manifest,
                           const ShardRecord& record);
  bool read_at(void* dst, std::size_t bytes, std::uint64_t offset) const;
  Fd fd_;
  std::string name_;
  std::uint64_t size_ = 0;
  std::vector<ShardEntry> entries_;
  std::unordered_map<std::string, std::size_t> by_name_;
};

}  // namespace trainrt::checkpoint::format
