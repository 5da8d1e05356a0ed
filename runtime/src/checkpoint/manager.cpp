#include "trainrt/checkpoint/manager.hpp"

#include <dirent.h>
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <thread>

#include "device_copy.hpp"
#include "files.hpp"
#include "shard_format.hpp"
#include "trainrt/error.hpp"
#include "trainrt/kernels/cpu.hpp"
#include "xxh3.hpp"

namespace trainrt::checkpoint {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
using format::kDataAlign;
using format::kMagic;
using format::shard_name;
using format::step_dir_name;
constexpr std::uint32_t kFormat = format::kVersion;

std::size_t align_up(std::size_t n, std::size_t a) { return (n + a - 1) / a * a; }

bootstrap::Blob to_blob(const json& j) {
  std::string s = j.dump();
  return bootstrap::Blob(s.begin(), s.end());
}
json from_blob(const bootstrap::Blob& b) { return json::parse(std::string(b.begin(), b.end())); }

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

std::atomic<int> g_stop_signal{0};
void on_stop_signal(int sig) { g_stop_signal.store(sig); }

}  // namespace

struct Manager::Impl {
  bootstrap::Session& session;
  Options opts;
  std::vector<Entry> entries;
  std::vector<std::byte, PageAligned<std::byte>> staging;  // host buffers, reused by every save; whole pages
  std::size_t staging_end = 0;     // where the last host buffer ends in it
  std::size_t staged_bytes = 0;    // host and pinned staging together, against the cap
  std::vector<std::vector<std::uint8_t>> blob_staging;
  std::thread writer;
  std::shared_future<SaveResult> last;
  Metadata restored_metadata;

  Impl(bootstrap::Session& s, Options o) : session(s), opts(std::move(o)) {}
  ~Impl() {
    for (auto& e : entries) pinned_free(e.pinned);
  }

  // Where an entry's bytes wait between the caller's memory and the file.
  std::byte* staged(const Entry& e) {
    return e.pinned ? static_cast<std::byte*>(e.pinned) : staging.data() + e.staging_offset;
  }

  void log(const std::string& m) const {
    if (opts.log) opts.log(m);
  }

  void join() {
    if (writer.joinable()) writer.join();
  }

  // Everything this rank writes for one step, from staging.
  SaveResult write_shard(std::uint64_t step, const std::string& dir, std::string& header_xxh3) {
    const auto t0 = Clock::now();
    json header = {{"format", kFormat}, {"step", step}, {"rank", session.rank()}, {"world_size", session.size()}};
    // Layout: the host-buffer staging as it is (page-aligned, whole pages: written around the page
    // cache), then device buffers and blobs. Readers go by each entry's offset.
    json list = json::array();
    std::vector<Piece> tail;
    std::size_t at = staging.size();
    std::size_t blob_index = 0;
    static const std::uint8_t zeros[64] = {};
    for (const auto& e : entries) {
      const void* src = e.data ? static_cast<const void*>(staged(e))
                               : static_cast<const void*>(blob_staging[blob_index].data());
      const std::size_t bytes = e.data ? e.bytes : blob_staging[blob_index++].size();
      std::size_t offset = e.staging_offset;
      if (!e.data || e.pinned) {
        offset = align_up(at, 64);
        if (offset > at) tail.push_back({zeros, offset - at});
        tail.push_back({src, bytes});
        at = offset + bytes;
      }
      list.push_back({{"name", e.name},
                      {"kind", e.data ? "buffer" : "blob"},
                      {"dtype", to_string(e.dtype)},
                      {"shape", e.shape},
                      {"offset", offset},
                      {"bytes", bytes},
                      {"checksum", fmt::format("{:016x}", XXH3_64bits(src, bytes))},
                      {"replicated", e.sharding == Sharding::Replicated}});
    }
    header["entries"] = list;
    const std::string text = header.dump();
    std::vector<std::uint8_t> head(align_up(16 + text.size(), kDataAlign), 0);
    std::memcpy(head.data(), kMagic, 8);
    std::uint32_t version = kFormat, len = static_cast<std::uint32_t>(text.size());
    std::memcpy(head.data() + 8, &version, 4);
    std::memcpy(head.data() + 12, &len, 4);
    std::memcpy(head.data() + 16, text.data(), text.size());
    header_xxh3 = fmt::format("{:016x}", XXH3_64bits(text.data(), text.size()));
    std::vector<Piece> pieces{{head.data(), head.size()}, {staging.data(), staging.size()}};
    pieces.insert(pieces.end(), tail.begin(), tail.end());
    const std::string tmp = dir + "/" + shard_name(session.rank()) + ".tmp";
    write_pieces_durably(tmp, pieces);
    rename_durably(tmp, dir + "/" + shard_name(session.rank()));
    SaveResult r;
    r.step = step;
    r.shard_bytes = head.size() + at;
    r.persist_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    return r;
  }

  // Rank 0, once every rank has synced its shard: manifest, then `latest`, then retention.
  void commit(std::uint64_t step, const std::string& dir, const std::vector<json>& shards, const Metadata& metadata) {
    json manifest = {{"format", kFormat}, {"step", step},         {"world_size", session.size()},
                     {"shards", shards},  {"metadata", metadata}};
    const std::string text = manifest.dump(2) + "\n";
    write_file_durably(dir + "/MANIFEST.json.tmp", text.data(), text.size());
    rename_durably(dir + "/MANIFEST.json.tmp", dir + "/MANIFEST.json");
    const std::string pointer = step_dir_name(step) + "\n";
    write_file_durably(opts.directory + "/latest.tmp", pointer.data(), pointer.size());
    rename_durably(opts.directory + "/latest.tmp", opts.directory + "/latest");
  }

  // Rank 0, after the commit was announced: deleting old steps is not part of making `step`
  // durable (unlinking a large shard takes tens of ms), so the save's future does not wait for it.
  void retire_older_than(std::uint64_t step) {
    auto steps = list_steps();
    unsigned kept = 0;
    for (std::uint64_t s : steps) {
      if (s > step) continue;
      if (++kept <= opts.keep_last) continue;
      std::string old = opts.directory + "/" + step_dir_name(s);
      remove_tree(old);
      log(fmt::format("checkpoint: removed step {} (keep_last={})", s, opts.keep_last));
    }
    fsync_directory(opts.directory);
  }

  std::vector<std::uint64_t> list_steps() const { return format::list_steps(opts.directory); }

  static void remove_tree(const std::string& dir) {
    // The manifest first: a removal cut short (the process exits) leaves an uncommitted step,
    // which restore skips by name, never a committed one with shards missing.
    ::unlink((dir + "/MANIFEST.json").c_str());
    if (DIR* d = ::opendir(dir.c_str())) {
      while (dirent* e = ::readdir(d))
        if (std::strcmp(e->d_name, ".") && std::strcmp(e->d_name, "..")) ::unlink((dir + "/" + e->d_name).c_str());
      ::closedir(d);
    }
    ::rmdir(dir.c_str());
  }

  // ------------------------------------------------------------------ restore
  // One step as this rank will read it: checked (manifest, sizes, header, entry table) before any
  // registered memory is touched.
  struct Candidate {
    struct Part {
      std::size_t entry;               // index into `entries`
      const format::ShardEntry* file;  // where it is in the shard
    };
    format::ShardReader reader;
    std::vector<Part> parts;
    std::vector<std::vector<std::uint8_t>> blobs;  // read blobs, handed over once every rank verified
    Metadata metadata;                             // the manifest's, for restored_metadata()
  };

  std::string check(std::uint64_t step, Candidate& c) {
    const std::string dir = opts.directory + "/" + step_dir_name(step);
    format::Manifest manifest;
    if (std::string why = format::read_manifest(dir, step, manifest); !why.empty()) return why;
    bool all_replicated = std::all_of(entries.begin(), entries.end(), [](const Entry& e) { return e.sharding == Sharding::Replicated; });
    unsigned source = session.rank();
    if (manifest.world_size != session.size()) {
      if (!all_replicated)
        return fmt::format("saved by {} ranks, this job has {} (only replicated state may change world size)",
                           manifest.world_size, session.size());
      source = 0;  // replicated: every rank reads rank 0's shard
    }
    const format::ShardRecord* record = manifest.shard_of(source);
    if (!record) return fmt::format("manifest lists no shard for rank {}", source);
    if (std::string why = c.reader.open(dir, *record); !why.empty()) return why;
    c.metadata = std::move(manifest.metadata);
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const Entry& e = entries[i];
      const format::ShardEntry* f = c.reader.find(e.name);
      if (!f) return fmt::format("{} lacks entry '{}'", c.reader.name(), e.name);
      if (e.data && (f->bytes != e.bytes || f->dtype != to_string(e.dtype)))
        return fmt::format("entry '{}' is {} bytes of {}, registered {} bytes of {}", e.name, f->bytes, f->dtype, e.bytes,
                           to_string(e.dtype));
      c.parts.push_back({i, f});
    }
    return {};
  }

  // Where a part's bytes are read to: straight into a host buffer (no second copy), or into
  // staging when the buffers must stay untouched until every rank has verified (device buffers
  // always; host buffers with verify_before_load).
  std::uint8_t* read_target(const Entry& e, Candidate& c, std::size_t bytes) {
    if (!e.data) return c.blobs.emplace_back(bytes).data();
    if (e.pinned || opts.verify_before_load) return reinterpret_cast<std::uint8_t*>(staged(e));
    return static_cast<std::uint8_t*>(e.data);
  }

  // Reads every part, verifying it as it arrives; "" or why the step is unusable.
  std::string load(Candidate& c) {
    for (const auto& part : c.parts) {
      if (std::string why = c.reader.read_verified(*part.file, read_target(entries[part.entry], c, part.file->bytes));
          !why.empty())
        return why;
    }
    return {};
  }

  // Every rank verified: move what waited in staging to its owner.
  void finish(Candidate& c) {
    restored_metadata = std::move(c.metadata);
    std::size_t blob = 0;
    for (auto& e : entries) {
      if (e.pinned) {
        copy_host_to_device(e.data, e.pinned, e.bytes);
      } else if (e.data) {
        if (!opts.verify_before_load) continue;  // already in place
        kernels::TensorRef ref{e.data, e.bytes / size_of(e.dtype)};
        kernels::cpu::unpack(staging.data() + e.staging_offset, &ref, 1, e.dtype);
      } else {
        *e.blob = std::move(c.blobs[blob++]);
      }
    }
  }

  // Every rank's verdict on one phase; "" when all are fine, else "rank r: why; ...".
  std::string agree(const std::string& why) {
    json mine = {{"rank", session.rank()}, {"why", why}};
    std::string reasons;
    for (const auto& b : session.allgather(to_blob(mine))) {
      json r = from_blob(b);
      if (!r.at("why").get<std::string>().empty())
        reasons += fmt::format("{}rank {}: {}", reasons.empty() ? "" : "; ", r.at("rank").get<unsigned>(),
                               r.at("why").get<std::string>());
    }
    return reasons;
  }

  bool loads_in_place() const {
    if (opts.verify_before_load) return false;
    return std::any_of(entries.begin(), entries.end(), [](const Entry& e) { return e.data && !e.pinned; });
  }
};

Manager::Manager(bootstrap::Session& session, Options options)
    : impl_(std::make_unique<Impl>(session, std::move(options))) {
  if (impl_->opts.directory.empty()) throw Error("no checkpoint directory given", "checkpoint");
  make_directory(impl_->opts.directory);
  if (const char* restarts = std::getenv("SLURM_RESTART_COUNT"))
    impl_->log(fmt::format("checkpoint: SLURM_RESTART_COUNT={} (rank {})", restarts, session.rank()));
}

Manager::~Manager() { impl_->join(); }

void Manager::register_buffer(const std::string& name, void* data, std::size_t bytes, DType dtype,
                              std::vector<std::int64_t> shape, Sharding sharding, Location where) {
  for (const auto& e : impl_->entries)
    if (e.name == name) throw Error(fmt::format("'{}' is registered twice", name), "checkpoint");
  if (impl_->staged_bytes + bytes > impl_->opts.staging_cap_bytes)
    throw Error(fmt::format("registering '{}' ({} bytes) exceeds the staging cap of {} bytes", name, bytes,
                            impl_->opts.staging_cap_bytes),
                "checkpoint");
  if (bytes % size_of(dtype) != 0)
    throw Error(fmt::format("'{}' is {} bytes, not a whole number of {} elements", name, bytes, to_string(dtype)), "checkpoint");
  impl_->join();
  Entry e{name, data, nullptr, bytes, dtype, std::move(shape), sharding, 0, nullptr};
  impl_->staged_bytes += bytes;
  if (where == Location::Device) {
    e.pinned = pinned_alloc(bytes);
  } else {
    e.staging_offset = align_up(impl_->staging_end, 64);
    impl_->staging_end = e.staging_offset + bytes;
    impl_->staging.resize(align_up(impl_->staging_end, kPage));
  }
  impl_->entries.push_back(std::move(e));
}

void Manager::register_blob(const std::string& name, std::vector<std::uint8_t>* blob, Sharding sharding) {
  for (const auto& e : impl_->entries)
    if (e.name == name) throw Error(fmt::format("'{}' is registered twice", name), "checkpoint");
  impl_->join();
  Entry e;
  e.name = name;
  e.blob = blob;
  e.dtype = DType::I32;
  e.sharding = sharding;
  impl_->entries.push_back(std::move(e));
}

std::shared_future<SaveResult> Manager::save(std::uint64_t step, Metadata metadata) {
  const auto t0 = Clock::now();
  impl_->join();  // one save in flight at a time; waiting for it counts as stall
  // The stall: copy registered state into the reused staging buffers.
  impl_->blob_staging.clear();
  for (const auto& e : impl_->entries) {
    if (e.pinned) {
      copy_device_to_host(e.pinned, e.data, e.bytes);
    } else if (e.data) {
      // The bucket-pack kernel's CPU twin: staging is one flat bucket of every registered buffer.
      kernels::ConstTensorRef ref{e.data, e.bytes / size_of(e.dtype)};
      kernels::cpu::pack(&ref, 1, e.dtype, impl_->staging.data() + e.staging_offset);
    } else {
      impl_->blob_staging.push_back(*e.blob);
    }
  }
  const double stall = std::chrono::duration<double>(Clock::now() - t0).count();
  auto promise = std::make_shared<std::promise<SaveResult>>();
  impl_->last = promise->get_future().share();
  impl_->writer = std::thread([this, step, stall, promise, t0, metadata = std::move(metadata)] {
    Impl& im = *impl_;
    const std::string dir = im.opts.directory + "/" + step_dir_name(step);
    SaveResult result;
    json status;
    try {
      make_directory(dir);
      std::string header_xxh3;
      result = im.write_shard(step, dir, header_xxh3);
      status = {{"ok", true}, {"rank", im.session.rank()}, {"file", shard_name(im.session.rank())},
                {"bytes", result.shard_bytes}, {"header_xxh3", header_xxh3}};
    } catch (const std::exception& e) {
      status = {{"ok", false}, {"rank", im.session.rank()}, {"error", e.what()}};
    }
    try {
      // Every rank reaches this agreement, failed or not, so nobody waits for a rank that gave up.
      std::vector<json> shards;
      std::string failures;
      for (const auto& b : im.session.allgather(to_blob(status))) {
        json s = from_blob(b);
        if (s.at("ok").get<bool>()) shards.push_back(s);
        else failures += fmt::format("{}rank {}: {}", failures.empty() ? "" : "; ", s.at("rank").get<unsigned>(),
                                     s.at("error").get<std::string>());
      }
      json commit_status = {{"ok", failures.empty()}, {"error", failures}};
      if (im.session.rank() == 0 && failures.empty()) {
        try {
          for (auto& s : shards) s.erase("ok");
          im.commit(step, dir, shards, metadata);
        } catch (const std::exception& e) {
          commit_status = {{"ok", false}, {"error", fmt::format("rank 0 could not commit: {}", e.what())}};
        }
      }
      json decided = from_blob(im.session.broadcast(to_blob(commit_status), 0));
      if (!decided.at("ok").get<bool>()) {
        // Leave nothing of the failed step behind (it never had a manifest, so restore skips it anyway).
        ::unlink((dir + "/" + shard_name(im.session.rank())).c_str());
        ::unlink((dir + "/" + shard_name(im.session.rank()) + ".tmp").c_str());
        ::rmdir(dir.c_str());
        throw Error(fmt::format("step {} not committed: {}", step, decided.at("error").get<std::string>()), "checkpoint");
      }
      result.step = step;
      result.stall_seconds = stall;
      result.persist_seconds = std::chrono::duration<double>(Clock::now() - t0).count() - stall;
      im.log(fmt::format("checkpoint: step {} committed ({} bytes on rank {}, stall {:.3f} s, persist {:.3f} s)", step,
                         result.shard_bytes, im.session.rank(), stall, result.persist_seconds));
      promise->set_value(result);
    } catch (...) {
      promise->set_exception(std::current_exception());
      return;
    }
    if (im.session.rank() == 0) {
      try {
        im.retire_older_than(step);
      } catch (const std::exception& e) {
        im.log(fmt::format("checkpoint: could not remove steps older than {}: {}", step, e.what()));
      }
    }
  });
  return impl_->last;
}

std::int64_t Manager::restore() {
  impl_->join();
  Impl& im = *impl_;
  // Rank 0's view of the directory decides the candidates, so all ranks walk the same list.
  json steps = json::array();
  if (im.session.rank() == 0)
    for (auto s : im.list_steps()) steps.push_back(s);
  steps = from_blob(im.session.broadcast(to_blob(steps), 0));
  std::string overwritten_by;  // a step that failed after it was read into the registered buffers
  for (const auto& s : steps) {
    const std::uint64_t step = s.get<std::uint64_t>();
    auto attempt = [&](auto&& phase) {
      std::string why;
      try {
        why = phase();
      } catch (const std::exception& e) {
        why = e.what();
      }
      return im.agree(why);
    };
    Impl::Candidate c;
    std::string reasons = attempt([&] { return im.check(step, c); });
    if (reasons.empty()) {
      reasons = attempt([&] { return im.load(c); });
      if (!reasons.empty() && im.loads_in_place()) overwritten_by = fmt::format("step {} ({})", step, reasons);
    }
    if (!reasons.empty()) {
      im.log(fmt::format("checkpoint: skipped step {}: {}", step, reasons));
      continue;
    }
    im.finish(c);
    im.log(fmt::format("checkpoint: restored step {} (rank {})", step, im.session.rank()));
    return static_cast<std::int64_t>(step);
  }
  if (!overwritten_by.empty())
    throw Error(fmt::format("no usable checkpoint, and the registered buffers hold part of {}: initialize them "
                            "again before training from scratch (Options::verify_before_load keeps them untouched)",
                            overwritten_by),
                "checkpoint restore");
  im.log("checkpoint: no usable checkpoint; starting fresh");
  return -1;
}

void install_stop_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

bool should_stop() { return g_stop_signal.load() != 0; }
int stop_signal() { return g_stop_signal.load(); }

void save_and_exit(Manager& manager, std::uint64_t step) {
  try {
    manager.save(step).get();
    manager.wait_idle();
    std::fflush(nullptr);
    std::_Exit(kRequeueExitCode);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trainrt: final checkpoint of step %llu failed: %s\n", static_cast<unsigned long long>(step), e.what());
    std::fflush(nullptr);
    std::_Exit(1);
  }
}

}  // namespace trainrt::checkpoint

namespace trainrt::checkpoint {
const std::string& Manager::directory() const { return impl_->opts.directory; }
void Manager::wait_idle() { impl_->join(); }
const Metadata& Manager::restored_metadata() const { return impl_->restored_metadata; }
}  // namespace trainrt::checkpoint
