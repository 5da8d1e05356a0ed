// Steps for frameworks that coordinate their own ranks (step_io.hpp): the shard writer, the
// layout check, the commit and retention of Manager, reached without a bootstrap session.
#include "trainrt/checkpoint/step_io.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <future>
#include <limits>
#include <map>

#include "commit.hpp"
#include "fingerprint.hpp"
#include "geometry.hpp"
#include "json_fields.hpp"
#include "layout.hpp"
#include "manager_impl.hpp"
#include "trainrt/error.hpp"

namespace trainrt::checkpoint {

using json = nlohmann::json;

namespace {

constexpr std::size_t kMaxAttachmentBytes = std::size_t{256} << 20;
constexpr const char* kAttachmentKey = "trainrt.attachment.";

[[noreturn]] void usage(const std::string& what) { throw UsageError(what, "checkpoint"); }

void check_item(const Item& it, std::map<std::string, int>& seen) {
  if (it.name.empty() || it.name.size() > format::kMaxNameBytes || !format::valid_utf8(it.name))
    usage(fmt::format("an entry name must be 1 to {} bytes of UTF-8", format::kMaxNameBytes));
  if (!seen.emplace(it.name, 0).second) usage(fmt::format("'{}' is written twice in one shard", it.name));
  if (it.bytes > 0 && !it.data) usage(fmt::format("'{}': a null buffer of {} bytes", it.name, it.bytes));
  if (it.shape.size() > format::kMaxDims)
    usage(fmt::format("'{}' has {} dimensions, more than {}", it.name, it.shape.size(), format::kMaxDims));
  if (!it.dtype) {
    if (it.shard) usage(fmt::format("'{}': opaque bytes cannot be a chunk of a global tensor", it.name));
    if (it.bytes > format::kMaxBlobBytes)
      usage(fmt::format("'{}' is {} bytes of an element type the format stores as opaque bytes, more than the {}-byte "
                        "limit of such entries",
                        it.name, it.bytes, format::kMaxBlobBytes));
    return;
  }
  const auto elements = geometry::volume(it.shape);
  if (!elements || *elements > std::numeric_limits<std::size_t>::max() / size_of(*it.dtype) ||
      it.bytes != *elements * size_of(*it.dtype))
    usage(fmt::format("'{}' is {} bytes; shape {} of {} needs {}", it.name, it.bytes, geometry::to_string(it.shape),
                      to_string(*it.dtype), elements ? fmt::format("{} elements", *elements) : std::string("too many")));
  if (it.shard) {
    if (it.shard->global_shape.size() > format::kMaxDims)
      usage(fmt::format("'{}' has {} global dimensions, more than {}", it.name, it.shard->global_shape.size(), format::kMaxDims));
    if (std::string why = geometry::check_inside({it.shard->offsets, it.shape}, it.shard->global_shape); !why.empty())
      usage(fmt::format("'{}': {}", it.name, why));
  }
}

void check_attachment_name(const std::string& n) {
  const bool ok = !n.empty() && n.size() <= 64 && std::isalnum(static_cast<unsigned char>(n[0])) &&
                  std::all_of(n.begin(), n.end(), [](char c) {
                    return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
                  });
  if (!ok || n.rfind("rank_", 0) == 0 || n.rfind(format::kManifestName, 0) == 0 || n == format::kLatestName)
    usage(fmt::format("attachment name '{}': use [A-Za-z0-9][A-Za-z0-9._-]*, at most 64 bytes, not a name of the format",
                      n));
}

std::string hex64(std::uint64_t v) { return fmt::format("{:016x}", v); }

}  // namespace

WrittenShard write_shard(const std::string& directory, std::uint64_t step, unsigned rank, unsigned world_size,
                         const std::vector<Item>& items) {
  if (step > format::kMaxStep) usage(fmt::format("step {} is above the largest step {}", step, format::kMaxStep));
  if (world_size < 1 || world_size > format::kMaxWorldSize || rank >= world_size)
    usage(fmt::format("rank {} of world size {}: need 0 <= rank < world size <= {}", rank, world_size, format::kMaxWorldSize));
  if (items.empty()) usage(fmt::format("rank {}'s shard of step {} has no entries", rank, step));
  if (items.size() > format::kMaxEntries) usage(fmt::format("{} entries in one shard, more than {}", items.size(), format::kMaxEntries));
  std::map<std::string, int> seen;
  for (const auto& it : items) check_item(it, seen);

  Dir root = Dir::open_or_create(directory);
  if (std::string why = write_refusal(root); !why.empty()) throw CheckpointError(why, "checkpoint");
  Dir dir = root.sub_or_create(format::step_dir_name(step));
  if (dir.stat().st_uid != ::geteuid())
    throw CheckpointError(fmt::format("{} is owned by uid {}, not by this process: refusing to write into it", dir.path(),
                            dir.stat().st_uid),
                "checkpoint");
  if (dir.exists(format::kManifestName))
    throw CheckpointError(fmt::format("step {} is already committed in {}: a committed step is never rewritten (save another step)",
                            step, directory),
                "checkpoint");

  json chunks = json::array();
  std::vector<std::pair<const Item*, format::Sharded>> sharded;
  format::ShardWriter w(step, rank, world_size, nullptr, 0);
  for (const auto& it : items) {
    std::optional<format::Sharded> where;
    if (it.shard) {
      where = format::Sharded{it.shard->global_shape, it.shard->offsets};
      chunks.push_back({{"name", it.name}, {"dtype", to_string(*it.dtype)}, {"global_shape", where->global_shape},
                        {"offsets", where->offsets}, {"shape", it.shape}});
      sharded.emplace_back(&it, *where);
    }
  }
  // The fingerprints only go into the commit record, not the file: computed beside the checksums
  // and the write (a second pass over the same memory), they cost the save little but a core.
  auto fingerprints = std::async(std::launch::async, [&sharded] {
    json f = json::object();
    for (const auto& [it, where] : sharded)
      f[it->name] = layout::hex(layout::chunk_fingerprint(it->name, where, it->shape, *it->dtype,
                                                          static_cast<const std::byte*>(it->data)));
    return f;
  });
  for (const auto& it : items) {
    std::optional<format::Sharded> where;
    if (it.shard) where = format::Sharded{it.shard->global_shape, it.shard->offsets};
    // Blobs carry a dtype field too; Manager writes I32 there, and readers ignore it for blobs.
    w.append(it.name, !it.dtype, it.dtype.value_or(DType::I32), it.shape, it.replicated, it.data, it.bytes, where);
  }
  const auto& pieces = w.finish();
  const std::string name = format::shard_name(rank);
  dir.write_new(name + ".tmp", pieces);
  dir.rename(name + ".tmp", name);  // not committed: renaming over a leftover of a failed save is fine
  dir.fsync();
  return {rank, w.file_bytes(), w.header_xxh3(), json{{"chunks", chunks}, {"fingerprints", fingerprints.get()}}.dump()};
}

void discard_shard(const std::string& directory, std::uint64_t step, unsigned rank) noexcept {
  try {
    Dir root = Dir::open(directory);
    const std::string name = format::step_dir_name(step);
    auto dir = root.sub(name);
    if (!dir || dir->exists(format::kManifestName) || dir->stat().st_uid != ::geteuid()) return;
    dir->unlink(format::shard_name(rank));
    dir->unlink(format::shard_name(rank) + ".tmp");
    root.rmdir(name);  // fails while other ranks' files remain: the last one out removes it
  } catch (...) {
  }
}

void commit_step(const std::string& directory, std::uint64_t step, unsigned world_size,
                 const std::vector<WrittenShard>& shards, const CommitOptions& options) {
  if (world_size < 1 || world_size > format::kMaxWorldSize)
    usage(fmt::format("world size {}: need 1..{}", world_size, format::kMaxWorldSize));
  if (shards.size() != world_size)
    usage(fmt::format("step {}: {} shards written for a world of {} ranks", step, shards.size(), world_size));
  std::vector<const WrittenShard*> by_rank(world_size, nullptr);
  for (const auto& s : shards) {
    if (s.rank >= world_size || by_rank[s.rank])
      usage(fmt::format("step {}: shard of rank {} is out of range or given twice", step, s.rank));
    by_rank[s.rank] = &s;
  }
  // Every rank's chunks, checked to tile their tensors exactly as Manager's save checks them.
  std::vector<bootstrap::Blob> gathered;
  std::map<std::string, std::uint64_t> sums;
  std::vector<format::ShardRecord> records;
  for (unsigned r = 0; r < world_size; ++r) {
    json c;
    try {
      c = json::parse(by_rank[r]->chunks);
      gathered.push_back(to_blob(c.at("chunks")));
      for (const auto& [name, part] : c.at("fingerprints").items()) {
        const std::string h = part.get<std::string>();
        if (!format::detail::is_hex16(h)) throw std::runtime_error("a malformed fingerprint");
        sums[name] = fingerprint::add(sums[name], layout::parse_hex(h));
      }
    } catch (const std::exception& e) {
      usage(fmt::format("step {}: rank {}'s shard record is not what write_shard returns ({})", step, r, e.what()));
    }
    records.push_back({r, format::shard_name(r), by_rank[r]->bytes, by_rank[r]->header_xxh3});
  }
  std::vector<format::TensorRecord> tensors = layout::combine(gathered, "commit");
  for (auto& t : tensors) t.fingerprint = layout::hex(sums[t.name]);

  Metadata metadata = options.metadata;
  for (const auto& a : options.attachments) {
    check_attachment_name(a.name);
    if (a.data.size() > kMaxAttachmentBytes)
      usage(fmt::format("attachment '{}' is {} bytes, more than {}", a.name, a.data.size(), kMaxAttachmentBytes));
    metadata[kAttachmentKey + a.name] = fmt::format("{} {}", a.data.size(), hex64(XXH3_64bits(a.data.data(), a.data.size())));
  }
  if (std::string why = format::check_metadata(metadata); !why.empty()) usage(why);

  Dir root = Dir::open(directory);
  if (std::string why = write_refusal(root); !why.empty()) throw CheckpointError(why, "checkpoint");
  std::string why;
  auto dir = root.sub(format::step_dir_name(step), &why);
  if (!dir) throw CheckpointError(fmt::format("step {} cannot be committed: {}", step, why), "checkpoint");
  if (dir->exists(format::kManifestName))
    throw CheckpointError(fmt::format("step {} is already committed in {}: a committed step is never rewritten", step, directory),
                "checkpoint");
  for (const auto& a : options.attachments) {
    dir->write_new(a.name + ".tmp", {{a.data.data(), a.data.size()}});
    dir->rename(a.name + ".tmp", a.name);
  }
  const auto t0 = std::chrono::steady_clock::now();
  commit_manifest(root, *dir, step, format::manifest_text(step, world_size, records, metadata, tensors), options.log);
  if (options.log)
    options.log(fmt::format("checkpoint: step {} committed ({} ranks, {} sharded tensors, commit {:.3f} s)", step,
                            world_size, tensors.size(),
                            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()));
  if (options.retire) retire_steps(directory, step, options.keep_last, options.log);
}

void retire_steps(const std::string& directory, std::uint64_t step, unsigned keep_last,
                  const std::function<void(const std::string&)>& log) noexcept {
  try {
    retire_older_than(Dir::open(directory), step, keep_last, log);
  } catch (const std::exception& e) {
    if (log) log(fmt::format("checkpoint: could not remove steps older than {}: {}", step, e.what()));
  }
}

// ------------------------------------------------------------------ reading

struct StepReader::Impl {
  Dir root, dir;
  format::Manifest manifest;
  std::map<unsigned, format::ShardReader> readers;

  format::ShardReader& shard(unsigned rank) {
    if (auto it = readers.find(rank); it != readers.end()) return it->second;
    const format::ShardRecord* rec = manifest.shard_of(rank);
    if (!rec) throw CheckpointError(fmt::format("step {} has no shard of rank {} (world size {})", manifest.step, rank, manifest.world_size),
                          "checkpoint");
    format::ShardReader r;
    if (std::string why = r.open(dir, manifest, *rec); !why.empty())
      throw CheckpointError(fmt::format("step {}, rank {}: {}", manifest.step, rank, why), "checkpoint");
    return readers.emplace(rank, std::move(r)).first->second;
  }
  const format::ShardEntry& find(unsigned rank, const std::string& name) {
    auto& r = shard(rank);
    const format::ShardEntry* e = r.find(name);
    if (!e) throw CheckpointError(fmt::format("step {}, rank {}: {} has no entry '{}'", manifest.step, rank, r.name(), name), "checkpoint");
    return *e;
  }
};

StepReader::StepReader(const std::string& directory, std::uint64_t step) : impl_(std::make_unique<Impl>()) {
  impl_->root = Dir::open(directory);
  std::string why;
  auto dir = impl_->root.sub(format::step_dir_name(step), &why);
  if (!dir) throw CheckpointError(fmt::format("step {}: {}", step, why), "checkpoint");
  impl_->dir = std::move(*dir);
  if (why = format::read_manifest(impl_->dir, step, impl_->manifest); !why.empty())
    throw CheckpointError(fmt::format("step {}: {}", step, why), "checkpoint");
}

StepReader::~StepReader() = default;
std::uint64_t StepReader::step() const { return impl_->manifest.step; }
unsigned StepReader::world_size() const { return impl_->manifest.world_size; }
const Metadata& StepReader::metadata() const { return impl_->manifest.metadata; }

std::string StepReader::check_shards() {
  std::string problems;
  unsigned bad = 0;
  for (unsigned r = 0; r < impl_->manifest.world_size && bad < 4; ++r) {
    try {
      impl_->shard(r);
    } catch (const Error& e) {
      problems += (problems.empty() ? "" : "; ") + std::string(e.bare_what());
      ++bad;
    }
  }
  return problems;
}

EntryInfo StepReader::entry(unsigned rank, const std::string& name) {
  const format::ShardEntry& e = impl_->find(rank, name);
  EntryInfo info{e.name, e.kind, e.dtype, e.shape, e.bytes, e.replicated, std::nullopt};
  if (e.sharded) info.shard = Shard{e.sharded->global_shape, e.sharded->offsets};
  return info;
}

void StepReader::read(unsigned rank, const std::string& name, void* dst, std::size_t bytes) {
  const format::ShardEntry& e = impl_->find(rank, name);
  if (bytes != e.bytes)
    usage(fmt::format("step {}, rank {}: entry '{}' is {} bytes, the destination {}", impl_->manifest.step, rank, name,
                      e.bytes, bytes));
  if (std::string why = impl_->shard(rank).read_verified(e, static_cast<std::uint8_t*>(dst)); !why.empty())
    throw CheckpointError(fmt::format("step {}, rank {}: {}", impl_->manifest.step, rank, why), "checkpoint");
}

std::string StepReader::attachment(const std::string& name) {
  check_attachment_name(name);
  const std::uint64_t step = impl_->manifest.step;
  auto it = impl_->manifest.metadata.find(kAttachmentKey + name);
  if (it == impl_->manifest.metadata.end())
    throw CheckpointError(fmt::format("step {} has no attachment '{}' in its manifest", step, name), "checkpoint");
  std::string data = impl_->dir.read_small(name, kMaxAttachmentBytes);
  const std::string want = it->second, got = fmt::format("{} {}", data.size(), hex64(XXH3_64bits(data.data(), data.size())));
  if (got != want)
    throw CheckpointError(fmt::format("step {}: attachment '{}' is '{}' (bytes, XXH3), its manifest says '{}'", step, name, got, want),
                "checkpoint");
  return data;
}

}  // namespace trainrt::checkpoint
