// The format's names and the manifest: step directory grammar, the `latest` pointer, listing
// steps, and reading/writing MANIFEST.json with every field checked.
#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "geometry.hpp"
#include "json_fields.hpp"
#include "shard_format.hpp"
#include "trainrt/error.hpp"

namespace trainrt::checkpoint::format {

using detail::Bad;
using detail::json;

std::string step_dir_name(std::uint64_t step) { return fmt::format("step_{:012}", step); }
std::string shard_name(unsigned rank) { return fmt::format("rank_{:05}.shard", rank); }

std::optional<std::uint64_t> parse_step_dir_name(std::string_view name) {
  constexpr std::string_view prefix = "step_";
  if (name.size() < prefix.size() + 12 || name.size() > prefix.size() + 19 || name.substr(0, prefix.size()) != prefix)
    return std::nullopt;
  std::uint64_t step = 0;
  for (char c : name.substr(prefix.size())) {
    if (c < '0' || c > '9') return std::nullopt;
    step = step * 10 + static_cast<std::uint64_t>(c - '0');  // at most 19 digits: no overflow
  }
  // Exactly the form step_dir_name writes: no extra zero padding, nothing after the digits.
  if (step > kMaxStep || step_dir_name(step) != name) return std::nullopt;
  return step;
}

std::string latest_text(std::uint64_t step) { return step_dir_name(step) + "\n"; }

std::optional<std::uint64_t> parse_latest(std::string_view text) {
  if (text.empty() || text.back() != '\n') return std::nullopt;
  return parse_step_dir_name(text.substr(0, text.size() - 1));
}

std::vector<std::uint64_t> list_steps(const Dir& root) {
  std::vector<std::uint64_t> steps;
  for (const auto& name : root.names())
    if (auto step = parse_step_dir_name(name); step && root.is_dir(name)) steps.push_back(*step);
  std::sort(steps.rbegin(), steps.rend());
  return steps;
}

bool valid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const auto* end = p + s.size();
  while (p < end) {
    const unsigned char c = *p;
    if (c < 0x80) {
      ++p;
      continue;
    }
    std::size_t n = 0;
    std::uint32_t cp = 0, min = 0;
    if ((c & 0xE0) == 0xC0) n = 1, cp = c & 0x1F, min = 0x80;
    else if ((c & 0xF0) == 0xE0) n = 2, cp = c & 0x0F, min = 0x800;
    else if ((c & 0xF8) == 0xF0) n = 3, cp = c & 0x07, min = 0x10000;
    else return false;
    if (static_cast<std::size_t>(end - p) <= n) return false;
    for (std::size_t i = 1; i <= n; ++i) {
      if ((p[i] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    p += n + 1;
  }
  return true;
}

std::string check_metadata(const Metadata& metadata) {
  std::size_t total = 0;
  for (const auto& [k, v] : metadata) {
    if (!valid_utf8(k) || !valid_utf8(v)) return fmt::format("metadata key or value is not UTF-8 (key of {} bytes)", k.size());
    total += k.size() + v.size();
  }
  if (total > kMaxMetadataBytes) return fmt::format("metadata is {} bytes, more than the {}-byte limit", total, kMaxMetadataBytes);
  return {};
}

const TensorRecord* Manifest::tensor(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors[it->second];
}

const ChunkRecord* Manifest::chunk_of(const TensorRecord& t, unsigned rank) const {
  auto it = std::lower_bound(t.chunks.begin(), t.chunks.end(), rank, [](const ChunkRecord& c, unsigned r) { return c.rank < r; });
  return it != t.chunks.end() && it->rank == rank ? &*it : nullptr;
}

std::size_t Manifest::chunks_of(unsigned rank) const { return rank < chunk_count_.size() ? chunk_count_[rank] : 0; }

void Manifest::index() {
  by_name_.clear();
  chunk_count_.assign(world_size, 0);
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    by_name_.emplace(tensors[i].name, i);
    for (const auto& c : tensors[i].chunks)
      if (c.rank < world_size) ++chunk_count_[c.rank];
  }
}

namespace {

// The tensor table of a format-2 manifest, every field and count bounded (docs/checkpoint.md
// "Limits"); the tiling of each tensor is checked by the caller.
void read_tensors(const json& table, Manifest& out) {
  if (!table.is_array()) throw Bad("\"tensors\" is not an array");
  if (table.size() > kMaxEntries) throw Bad(fmt::format("lists more than {} tensors", kMaxEntries));
  std::size_t chunks = 0;
  std::set<std::string> names;
  for (const auto& t : table) {
    TensorRecord r;
    r.name = detail::str(t, "name", kMaxNameBytes);
    if (r.name.empty() || !names.insert(r.name).second) throw Bad("lists a tensor without a name, or one twice");
    r.dtype = detail::str(t, "dtype", 16);
    try {
      parse_dtype(r.dtype);
    } catch (const Error&) {
      throw Bad(fmt::format("tensor '{}' has an unknown dtype", r.name));
    }
    r.global_shape = detail::dims(t, "global_shape", kMaxDims);
    r.fingerprint = detail::str(t, "fingerprint", 16);
    if (!detail::is_hex16(r.fingerprint)) throw Bad(fmt::format("tensor '{}' has a malformed fingerprint", r.name));
    const json& list = detail::field(t, "chunks");
    if (!list.is_array()) throw Bad(fmt::format("tensor '{}' has no list of chunks", r.name));
    if (list.size() > out.world_size || (chunks += list.size()) > kMaxChunks)
      throw Bad(fmt::format("tensor '{}' has more chunks than ranks, or the table more than {} chunks", r.name, kMaxChunks));
    for (const auto& c : list) {
      ChunkRecord chunk;
      chunk.rank = static_cast<unsigned>(detail::u64(c, "rank", out.world_size - 1));
      chunk.offsets = detail::dims(c, "offsets", kMaxDims);
      chunk.shape = detail::dims(c, "shape", kMaxDims);
      r.chunks.push_back(std::move(chunk));
    }
    std::sort(r.chunks.begin(), r.chunks.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
    for (std::size_t i = 1; i < r.chunks.size(); ++i)
      if (r.chunks[i].rank == r.chunks[i - 1].rank)
        throw Bad(fmt::format("tensor '{}' lists two chunks of rank {}", r.name, r.chunks[i].rank));
    out.tensors.push_back(std::move(r));
  }
}

}  // namespace

std::string read_manifest(const Dir& step_dir, std::uint64_t step, Manifest& out) {
  out = Manifest{};
  if (!step_dir.exists(kManifestName)) return "no committed manifest";
  std::string text;
  try {
    text = step_dir.read_small(kManifestName, kMaxManifestBytes);
  } catch (const Error& e) {
    return fmt::format("{} is unusable ({})", kManifestName, e.bare_what());
  }
  try {
    const json j = detail::parse_bounded(text, kMaxJsonDepth);
    const auto version = detail::u64(j, "format", UINT32_MAX);
    if (version < kOldestVersion || version > kVersion) throw Bad(fmt::format("has format version {}, this reader knows {} to {}", version, kOldestVersion, kVersion));
    out.format = static_cast<unsigned>(version);
    if (detail::u64(j, "step", UINT64_MAX) != step) throw Bad("is for another step");
    out.step = step;
    out.world_size = static_cast<unsigned>(detail::u64(j, "world_size", kMaxWorldSize));
    if (out.world_size == 0) throw Bad("has world_size 0");
    const json& shards = detail::field(j, "shards");
    if (!shards.is_array()) throw Bad("\"shards\" is not an array");
    if (shards.size() != out.world_size)
      throw Bad(fmt::format("lists {} shards for world_size {}", shards.size(), out.world_size));
    out.shards.resize(out.world_size);
    std::vector<bool> seen(out.world_size, false);
    for (const auto& s : shards) {
      const unsigned rank = static_cast<unsigned>(detail::u64(s, "rank", out.world_size - 1));
      if (seen[rank]) throw Bad(fmt::format("lists rank {} twice", rank));
      seen[rank] = true;
      ShardRecord& r = out.shards[rank];
      r.rank = rank;
      r.file = detail::str(s, "file", kMaxNameBytes);
      if (r.file != shard_name(rank)) throw Bad(fmt::format("names shard file '{}' for rank {}", r.file.size() > 64 ? "(long)" : r.file, rank));
      r.bytes = detail::u64(s, "bytes", kMaxShardBytes);
      if (s.contains("header_xxh3")) {
        r.header_xxh3 = detail::str(s, "header_xxh3", 16);
        if (!detail::is_hex16(r.header_xxh3)) throw Bad(fmt::format("has a malformed header_xxh3 for rank {}", rank));
      }
    }
    if (j.contains("metadata")) {
      const json& m = j.at("metadata");
      if (!m.is_object()) throw Bad("\"metadata\" is not an object");
      for (auto it = m.begin(); it != m.end(); ++it) {
        if (!it.value().is_string()) throw Bad("a metadata value is not a string");
        out.metadata.emplace(it.key(), it.value().get<std::string>());
      }
    }
    if (j.contains("tensors")) {
      if (out.format < 2) throw Bad("has a tensor table in format 1");
      read_tensors(j.at("tensors"), out);
    }
    out.index();
    for (const auto& t : out.tensors) {
      std::vector<geometry::Owned> boxes;
      for (const auto& c : t.chunks) boxes.push_back({c.rank, {c.offsets, c.shape}});
      if (std::string why = geometry::check_tiling(boxes, t.global_shape); !why.empty())
        throw Bad(fmt::format("tensor '{}': {}", t.name, why));
    }
  } catch (const Bad& e) {
    out = Manifest{};
    return fmt::format("{} is corrupt: {}", kManifestName, e.what());
  } catch (const std::exception& e) {  // a json error not foreseen above: still only a verdict
    out = Manifest{};
    return fmt::format("{} is corrupt ({})", kManifestName, e.what());
  }
  return {};
}

std::string manifest_text(std::uint64_t step, unsigned world_size, const std::vector<ShardRecord>& shards,
                          const Metadata& metadata, const std::vector<TensorRecord>& tensors) {
  json list = json::array();
  for (const auto& s : shards)
    list.push_back({{"rank", s.rank}, {"file", s.file}, {"bytes", s.bytes}, {"header_xxh3", s.header_xxh3}});
  json manifest = {{"format", kVersion}, {"step", step},         {"world_size", world_size},
                   {"shards", list},     {"metadata", metadata}};
  if (!tensors.empty()) {
    json table = json::array();
    for (const auto& t : tensors) {
      json chunks = json::array();
      for (const auto& c : t.chunks) chunks.push_back({{"rank", c.rank}, {"offsets", c.offsets}, {"shape", c.shape}});
      table.push_back({{"name", t.name}, {"dtype", t.dtype}, {"global_shape", t.global_shape},
                       {"fingerprint", t.fingerprint}, {"chunks", chunks}});
    }
    manifest["tensors"] = table;
  }
  return detail::dump_safe(manifest, 2) + "\n";
}

}  // namespace trainrt::checkpoint::format
