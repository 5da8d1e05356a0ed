// Shards: ShardWriter lays one out (header page, data region, appended entries), ShardReader opens
// one against its manifest record and checks every field before anything is read from its data.
#include "shard_format.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "json_fields.hpp"
#include "trainrt/error.hpp"
#include "xxh3.hpp"

namespace trainrt::checkpoint::format {
namespace {

using detail::Bad;
using detail::json;

std::uint64_t align_up(std::uint64_t n, std::uint64_t a) { return (n + a - 1) / a * a; }
std::string hex(std::uint64_t h) { return fmt::format("{:016x}", h); }

// "" when a sharded entry of `rank`'s shard is exactly the chunk the manifest lists for it.
std::string check_chunk(const ShardEntry& s, const Manifest& manifest, unsigned rank) {
  const TensorRecord* t = manifest.tensor(s.name);
  const ChunkRecord* c = t ? manifest.chunk_of(*t, rank) : nullptr;
  if (!c) return fmt::format("tensor '{}': rank {}'s shard holds a chunk the manifest does not list", s.name, rank);
  if (t->dtype != s.dtype || t->global_shape != s.sharded->global_shape || c->offsets != s.sharded->offsets ||
      c->shape != s.shape)
    return fmt::format("tensor '{}': rank {}'s shard and the manifest disagree on its chunk (dtype, global shape, offsets "
                       "or shape)",
                       s.name, rank);
  return {};
}

}  // namespace

// ------------------------------------------------------------------ writer

ShardWriter::ShardWriter(std::uint64_t step, unsigned rank, unsigned world_size, const void* region, std::size_t region_bytes)
    : step_(step), rank_(rank), world_size_(world_size), region_(region), region_bytes_(region_bytes), end_(region_bytes) {}

void ShardWriter::add(const std::string& name, bool blob, DType dtype, const std::vector<std::int64_t>& shape,
                      bool replicated, const void* data, std::size_t offset, std::size_t bytes,
                      const std::optional<Sharded>& sharded) {
  written_.push_back({name, blob ? "blob" : "buffer", to_string(dtype), shape, offset, bytes,
                      hex(XXH3_64bits(data, bytes)), replicated, sharded});
}

void ShardWriter::place(const std::string& name, bool blob, DType dtype, const std::vector<std::int64_t>& shape,
                        bool replicated, std::size_t offset, std::size_t bytes, const std::optional<Sharded>& sharded) {
  if (offset > region_bytes_ || bytes > region_bytes_ - offset)
    throw UsageError(fmt::format("entry '{}' lies outside the staged region", name), "checkpoint");
  add(name, blob, dtype, shape, replicated, static_cast<const std::byte*>(region_) + offset, offset, bytes, sharded);
}

void ShardWriter::append(const std::string& name, bool blob, DType dtype, const std::vector<std::int64_t>& shape,
                         bool replicated, const void* data, std::size_t bytes, const std::optional<Sharded>& sharded) {
  static const std::uint8_t zeros[64] = {};
  const std::size_t offset = static_cast<std::size_t>(align_up(end_, 64));
  if (offset > end_) tail_.push_back({zeros, offset - end_});
  tail_.push_back({data, bytes});
  end_ = offset + bytes;
  add(name, blob, dtype, shape, replicated, data, offset, bytes, sharded);
}

std::string ShardWriter::header_text(const std::vector<ShardEntry>& entries, std::uint64_t step, unsigned rank,
                                     unsigned world_size) {
  json list = json::array();
  for (const auto& e : entries) {
    list.push_back({{"name", e.name},           {"kind", e.kind},   {"dtype", e.dtype},
                    {"shape", e.shape},         {"offset", e.offset}, {"bytes", e.bytes},
                    {"checksum", e.checksum},   {"replicated", e.replicated}});
    if (e.sharded) {
      list.back()["global_shape"] = e.sharded->global_shape;
      list.back()["offsets"] = e.sharded->offsets;
    }
  }
  json header = {{"format", kVersion}, {"step", step}, {"rank", rank}, {"world_size", world_size}, {"entries", list}};
  return detail::dump_safe(header);
}

std::size_t ShardWriter::header_bound(std::vector<ShardEntry> entries) {
  // Numbers printed with the most digits they can have: the real header is never longer.
  for (auto& e : entries) {
    e.offset = e.bytes = UINT64_MAX;
    e.checksum.assign(16, '0');
  }
  const std::string text = header_text(entries, kMaxStep, kMaxWorldSize, kMaxWorldSize);
  return static_cast<std::size_t>(align_up(16 + text.size(), kDataAlign));
}

const std::vector<Piece>& ShardWriter::finish(std::size_t head_bytes) {
  std::string text = header_text(written_, step_, rank_, world_size_);
  // A fixed header size (the memory tier's mapped file reserves it before the data) is reached
  // with trailing spaces inside the JSON text: readers parse it as before, and header_xxh3 pins it.
  if (head_bytes > 0) {
    if (head_bytes % kDataAlign != 0 || 16 + text.size() > head_bytes)
      throw Error(fmt::format("the shard header needs {} bytes, more than the {} reserved for it", 16 + text.size(), head_bytes),
                  "checkpoint");
    text.append(head_bytes - 16 - text.size(), ' ');
  }
  if (text.size() > kMaxHeaderBytes)
    throw UsageError(fmt::format("the shard header would be {} bytes, more than the {}-byte limit readers accept (too "
                                 "many registered entries or too long names)",
                                 text.size(), kMaxHeaderBytes),
                     "checkpoint");
  head_.assign(static_cast<std::size_t>(align_up(16 + text.size(), kDataAlign)), 0);
  std::memcpy(head_.data(), kMagic, 8);
  const std::uint32_t version = kVersion, len = static_cast<std::uint32_t>(text.size());
  std::memcpy(head_.data() + 8, &version, 4);
  std::memcpy(head_.data() + 12, &len, 4);
  std::memcpy(head_.data() + 16, text.data(), text.size());
  header_xxh3_ = hex(XXH3_64bits(text.data(), text.size()));
  pieces_ = {{head_.data(), head_.size()}, {region_, region_bytes_}};
  pieces_.insert(pieces_.end(), tail_.begin(), tail_.end());
  file_bytes_ = head_.size() + end_;
  return pieces_;
}

// ------------------------------------------------------------------ reader

bool ShardReader::read_at(void* dst, std::size_t bytes, std::uint64_t offset) const {
  std::size_t got = 0;
  while (got < bytes) {
    ssize_t r = ::pread(fd_.get(), static_cast<char*>(dst) + got, bytes - got, static_cast<off_t>(offset + got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    got += static_cast<std::size_t>(r);
  }
  return true;
}

std::string ShardReader::open(const Dir& step_dir, const Manifest& manifest, const ShardRecord& record) {
  name_ = shard_name(record.rank);
  entries_.clear();
  by_name_.clear();
  size_ = 0;
  struct stat st {};
  std::string why;
  fd_ = step_dir.open_regular(name_, st, why);
  if (!fd_) return why;
  ::posix_fadvise(fd_.get(), 0, 0, POSIX_FADV_SEQUENTIAL);  // larger readahead: disk reads overlap hashing
  size_ = static_cast<std::uint64_t>(st.st_size);
  if (size_ != record.bytes) return fmt::format("{} is {} bytes, the manifest says {}", name_, size_, record.bytes);
  if (size_ > kMaxShardBytes) return fmt::format("{} is {} bytes, more than the {}-byte limit", name_, size_, kMaxShardBytes);
  if (size_ > kSparseCheckAbove && static_cast<std::uint64_t>(st.st_blocks) * 512 < size_ / kSparseRatio)
    return fmt::format("{} is sparse ({} of {} bytes allocated): not a shard trainrt wrote", name_,
                       static_cast<std::uint64_t>(st.st_blocks) * 512, size_);
  char head[16];
  if (size_ < 16 || !read_at(head, 16, 0) || std::memcmp(head, kMagic, 8) != 0) return fmt::format("{} has no shard header", name_);
  std::uint32_t version = 0, len = 0;
  std::memcpy(&version, head + 8, 4);
  std::memcpy(&len, head + 12, 4);
  if (version < kOldestVersion || version > kVersion)
    return fmt::format("{} has format version {}, this reader knows {} to {}", name_, version, kOldestVersion, kVersion);
  if (len > kMaxHeaderBytes) return fmt::format("{} claims a {}-byte header, more than the {}-byte limit", name_, len, kMaxHeaderBytes);
  const std::uint64_t data_start = align_up(16 + std::uint64_t{len}, kDataAlign);
  if (data_start > size_) return fmt::format("{} header runs past the file", name_);
  std::string text(len, '\0');
  if (!read_at(text.data(), len, 16)) return fmt::format("{}: cannot read its header", name_);
  // The manifest pins the header (and so every entry's checksum and offset): a header altered
  // into other valid JSON is caught here, before any buffer is touched.
  if (!record.header_xxh3.empty() && hex(XXH3_64bits(text.data(), text.size())) != record.header_xxh3)
    return fmt::format("{} header does not match its checksum in the manifest", name_);
  try {
    why = parse_header(text, data_start, manifest, record);
  } catch (const Bad& e) {
    why = fmt::format("{} header is corrupt: {}", name_, e.what());
  } catch (const std::exception& e) {
    why = fmt::format("{} header is corrupt ({})", name_, e.what());
  }
  if (!why.empty()) {
    entries_.clear();
    by_name_.clear();
  }
  return why;
}

std::string ShardReader::parse_header(const std::string& text, std::uint64_t data_start, const Manifest& manifest,
                                      const ShardRecord& record) {
  const json h = detail::parse_bounded(text, kMaxJsonDepth);
  const auto version = detail::u64(h, "format", UINT32_MAX);
  if (version < kOldestVersion || version > kVersion) throw Bad("has a format version this reader does not know");
  // The header must describe this very slot of this very step: a shard copied from another rank,
  // step or world would otherwise restore someone else's state.
  if (detail::u64(h, "step", UINT64_MAX) != manifest.step) throw Bad(fmt::format("is for another step than {}", manifest.step));
  if (detail::u64(h, "rank", UINT32_MAX) != record.rank) throw Bad(fmt::format("is for another rank than {}", record.rank));
  if (detail::u64(h, "world_size", UINT32_MAX) != manifest.world_size)
    throw Bad(fmt::format("is for another world size than {}", manifest.world_size));
  const json& list = detail::field(h, "entries");
  if (!list.is_array()) throw Bad("\"entries\" is not an array");
  if (list.empty()) throw Bad("has no entries");
  if (list.size() > kMaxEntries) throw Bad(fmt::format("has more than {} entries", kMaxEntries));
  const std::uint64_t data_bytes = size_ - data_start;
  entries_.reserve(list.size());
  std::size_t sharded_entries = 0;
  for (const auto& e : list) {
    ShardEntry s;
    s.name = detail::str(e, "name", kMaxNameBytes);
    if (s.name.empty()) throw Bad("has an entry without a name");
    s.kind = detail::str(e, "kind", 16);
    if (s.kind != "buffer" && s.kind != "blob") throw Bad("has an entry of an unknown kind");
    s.dtype = detail::str(e, "dtype", 16);
    DType dtype;
    try {
      dtype = parse_dtype(s.dtype);
    } catch (const Error&) {
      throw Bad("has an entry of an unknown dtype");
    }
    try {
      s.shape = detail::dims(e, "shape", kMaxDims);
    } catch (const Bad&) {
      throw Bad(fmt::format("has a shape that is not a list of at most {} non-negative sizes", kMaxDims));
    }
    const std::uint64_t offset = detail::u64(e, "offset", data_bytes);
    s.bytes = detail::u64(e, "bytes", UINT64_MAX);
    if (s.bytes > data_bytes - offset)  // offset <= data_bytes: no overflow either way
      return fmt::format("entry '{}' runs past the end of {}", s.name, name_);
    s.offset = data_start + offset;
    if (s.kind == "buffer" && s.bytes % size_of(dtype) != 0) throw Bad("has a buffer that is not a whole number of elements");
    if (s.kind == "blob" && s.bytes > kMaxBlobBytes) throw Bad(fmt::format("has a blob larger than {} bytes", kMaxBlobBytes));
    s.checksum = detail::str(e, "checksum", 16);
    if (!detail::is_hex16(s.checksum)) throw Bad("has a malformed checksum");
    if (e.contains("replicated")) {
      if (!e.at("replicated").is_boolean()) throw Bad("has a \"replicated\" that is not true or false");
      s.replicated = e.at("replicated").get<bool>();
    }
    if (e.contains("global_shape") || e.contains("offsets")) {
      if (version < 2 || s.kind != "buffer" || s.replicated) throw Bad(fmt::format("entry '{}' cannot be sharded", s.name));
      s.sharded = Sharded{detail::dims(e, "global_shape", kMaxDims), detail::dims(e, "offsets", kMaxDims)};
      if (std::string why = check_chunk(s, manifest, record.rank); !why.empty()) return why;
      ++sharded_entries;
    }
    if (!by_name_.emplace(s.name, entries_.size()).second) throw Bad("names one entry twice");
    entries_.push_back(std::move(s));
  }
  // Every chunk the manifest gives this rank is in its shard (those present were matched above).
  if (sharded_entries != manifest.chunks_of(record.rank))
    return fmt::format("{} holds {} chunks of sharded tensors, the manifest lists {} for rank {}", name_, sharded_entries,
                       manifest.chunks_of(record.rank), record.rank);
  return {};
}

bool ShardReader::read_piece(const ShardEntry& entry, std::uint64_t offset, std::uint8_t* dst, std::size_t bytes,
                             XXH3_state_t* state) const {
  if (offset > entry.bytes || bytes > entry.bytes - offset || !read_at(dst, bytes, entry.offset + offset)) return false;
  XXH3_64bits_update(state, dst, bytes);
  return true;
}

void ShardReader::prefetch(const ShardEntry& entry, std::uint64_t offset, std::size_t bytes) const {
  if (offset > entry.bytes) return;
  ::posix_fadvise(fd_.get(), static_cast<off_t>(entry.offset + offset),
                  static_cast<off_t>(std::min<std::uint64_t>(bytes, entry.bytes - offset)), POSIX_FADV_WILLNEED);
}

const ShardEntry* ShardReader::find(const std::string& entry_name) const {
  auto it = by_name_.find(entry_name);
  return it == by_name_.end() ? nullptr : &entries_[it->second];
}

std::string ShardReader::read_verified(
    const ShardEntry& entry, std::uint8_t* dst, bool reuse_piece,
    const std::function<void(std::uint64_t, const std::uint8_t*, std::size_t)>& seen) const {
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(), XXH3_freeState);
  if (!state) return "out of memory for a hash state";
  XXH3_64bits_reset(state.get());
  for (std::uint64_t done = 0; done < entry.bytes; done += kPiece) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(kPiece, entry.bytes - done));
    std::uint8_t* piece = reuse_piece ? dst : dst + done;
    if (!read_at(piece, n, entry.offset + done)) return fmt::format("{}: short read in entry '{}'", name_, entry.name);
    XXH3_64bits_update(state.get(), piece, n);
    if (seen) seen(done, piece, n);
  }
  if (hex(XXH3_64bits_digest(state.get())) != entry.checksum)
    return fmt::format("entry '{}' in {} fails its checksum", entry.name, name_);
  return {};
}

}  // namespace trainrt::checkpoint::format
