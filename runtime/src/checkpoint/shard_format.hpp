#pragma once
// The on-disk format (docs/checkpoint.md, version 1) as the manager and trainrt-ckpt read it:
// step directories, manifests, and shards opened, bounds-checked and hashed piece by piece.
#include <cstdint>
#include <string>
#include <vector>

#include "../fd.hpp"
#include "trainrt/checkpoint/manager.hpp"

namespace trainrt::checkpoint::format {

constexpr char kMagic[8] = {'T', 'R', 'T', 'S', 'H', 'R', 'D', '1'};
constexpr std::uint32_t kVersion = 1;
constexpr std::size_t kDataAlign = 4096;

std::string step_dir_name(std::uint64_t step);
std::string shard_name(unsigned rank);
// Step numbers of DIR's step_* directories, newest first (committed or not).
std::vector<std::uint64_t> list_steps(const std::string& directory);

struct ShardRecord {  // one shard as the manifest commits it
  unsigned rank = 0;
  std::string file;
  std::uint64_t bytes = 0;
  std::string header_xxh3;  // empty in manifests written before it existed
};

struct Manifest {
  std::uint64_t step = 0;
  unsigned world_size = 0;
  Metadata metadata;
  std::vector<ShardRecord> shards;
  const ShardRecord* shard_of(unsigned rank) const;
};

// "" and `out` filled, or why the step has no usable manifest.
std::string read_manifest(const std::string& step_dir, std::uint64_t step, Manifest& out);

struct ShardEntry {
  std::string name;
  std::string kind;  // buffer | blob
  std::string dtype;
  std::vector<std::int64_t> shape;
  std::uint64_t offset = 0;  // in the file
  std::uint64_t bytes = 0;
  std::string checksum;      // XXH3-64, hex
  bool replicated = false;
};

class ShardReader {
 public:
  // "" or the problem: cannot open, size not as committed, no magic, header out of bounds, header
  // not matching the manifest's checksum, corrupt JSON, an entry running past the end.
  std::string open(const std::string& step_dir, const ShardRecord& record);
  const std::string& name() const { return name_; }
  std::uint64_t file_size() const { return size_; }
  const std::vector<ShardEntry>& entries() const { return entries_; }
  const ShardEntry* find(const std::string& entry_name) const;
  // Reads the entry into `dst` (its full size), hashing each 1 MiB piece while it is in cache;
  // "" or the problem. With `reuse_piece`, every piece lands in dst's first 1 MiB (checking only).
  std::string read_verified(const ShardEntry& entry, std::uint8_t* dst, bool reuse_piece = false) const;

  static constexpr std::size_t kPiece = std::size_t{1} << 20;

 private:
  bool read_at(void* dst, std::size_t bytes, std::uint64_t offset) const;
  Fd fd_;
  std::string name_;
  std::uint64_t size_ = 0;
  std::vector<ShardEntry> entries_;
};

}  // namespace trainrt::checkpoint::format
