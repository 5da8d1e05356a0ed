// Restore (docs/checkpoint.md "Restore"): the newest step every rank can verify, checked through
// the same format checks trainrt-ckpt uses, plus what only a job knows (its registered entries).
#include <fmt/format.h>

#include <algorithm>

#include "manager_impl.hpp"
#include "trainrt/error.hpp"
#include "trainrt/kernels/cpu.hpp"

namespace trainrt::checkpoint {

using json = nlohmann::json;

std::string Manager::Impl::check(std::uint64_t step, Candidate& c) {
  std::string why;
  auto dir = root.sub(format::step_dir_name(step), &why);
  if (!dir) return why;
  format::Manifest manifest;
  if (why = format::read_manifest(*dir, step, manifest); !why.empty()) return why;
  const bool all_replicated =
      std::all_of(entries.begin(), entries.end(), [](const Entry& e) { return e.sharding == Sharding::Replicated; });
  unsigned source = session.rank();
  if (manifest.world_size != session.size()) {
    if (!all_replicated)
      return fmt::format("saved by {} ranks, this job has {} (only replicated state may change world size)",
                         manifest.world_size, session.size());
    source = 0;  // replicated: every rank reads rank 0's shard
  }
  const format::ShardRecord* record = manifest.shard_of(source);
  if (!record) return fmt::format("manifest lists no shard for rank {}", source);
  if (why = c.reader.open(*dir, manifest, *record); !why.empty()) return why;
  c.metadata = std::move(manifest.metadata);
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    const format::ShardEntry* f = c.reader.find(e.name);
    if (!f) return fmt::format("{} lacks entry '{}'", c.reader.name(), e.name);
    const char* kind = e.data ? "buffer" : "blob";
    if (f->kind != kind) return fmt::format("entry '{}' is a {} in {}, registered as a {}", e.name, f->kind, c.reader.name(), kind);
    // Another world size reads rank 0's shard for every rank: only state saved as replicated may.
    if (manifest.world_size != session.size() && !f->replicated)
      return fmt::format("entry '{}' was saved per rank by {} ranks; it cannot be restored by {}", e.name,
                         manifest.world_size, session.size());
    if (e.data && (f->bytes != e.bytes || f->dtype != to_string(e.dtype)))
      return fmt::format("entry '{}' is {} bytes of {}, registered {} bytes of {}", e.name, f->bytes, f->dtype, e.bytes,
                         to_string(e.dtype));
    c.parts.push_back({i, f});
  }
  return {};
}

// Where a part's bytes are read to: straight into a host buffer (no second copy), or into
// staging when the buffers must stay untouched until every rank has verified (device buffers
// always; host buffers with verify_before_load). Blob sizes were capped by the reader.
std::uint8_t* Manager::Impl::read_target(const Entry& e, Candidate& c, std::size_t bytes) {
  if (!e.data) return c.blobs.emplace_back(bytes).data();
  if (e.pinned || opts.verify_before_load) return reinterpret_cast<std::uint8_t*>(staged(e));
  return static_cast<std::uint8_t*>(e.data);
}

// Reads every part, verifying it as it arrives; "" or why the step is unusable.
std::string Manager::Impl::load(Candidate& c) {
  for (const auto& part : c.parts) {
    const auto bytes = static_cast<std::size_t>(part.file->bytes);
    if (std::string why = c.reader.read_verified(*part.file, read_target(entries[part.entry], c, bytes)); !why.empty())
      return why;
  }
  return {};
}

// Every rank verified: move what waited in staging to its owner.
void Manager::Impl::finish(Candidate& c) {
  restored_metadata = std::move(c.metadata);
  std::size_t blob = 0;
  for (auto& e : entries) {
    if (e.pinned) {
      copy_host_to_device(e.data, e.pinned, e.bytes, e.stream);
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
std::string Manager::Impl::agree(const std::string& why) {
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

bool Manager::Impl::loads_in_place() const {
  if (opts.verify_before_load) return false;
  return std::any_of(entries.begin(), entries.end(), [](const Entry& e) { return e.data && !e.pinned; });
}

std::int64_t Manager::Impl::restore() {
  join();
  // Rank 0's view of the directory decides the candidates, so all ranks walk the same list.
  json steps = json::array();
  if (session.rank() == 0) {
    try {
      for (auto s : format::list_steps(root)) steps.push_back(s);
    } catch (const std::exception& e) {
      log(fmt::format("checkpoint: cannot list {}: {}", root.path(), e.what()));
    }
  }
  steps = from_blob(session.broadcast(to_blob(steps), 0));
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
      return agree(why);
    };
    Candidate c;
    std::string reasons = attempt([&] { return check(step, c); });
    if (reasons.empty()) {
      reasons = attempt([&] { return load(c); });
      if (!reasons.empty() && loads_in_place()) overwritten_by = fmt::format("step {} ({})", step, reasons);
    }
    if (!reasons.empty()) {
      log(fmt::format("checkpoint: skipped step {}: {}", step, reasons));
      continue;
    }
    finish(c);
    log(fmt::format("checkpoint: restored step {} (rank {})", step, session.rank()));
    return static_cast<std::int64_t>(step);
  }
  if (!overwritten_by.empty())
    throw Error(fmt::format("no usable checkpoint, and the registered buffers hold part of {}: initialize them "
                            "again before training from scratch (Options::verify_before_load keeps them untouched)",
                            overwritten_by),
                "checkpoint restore");
  log("checkpoint: no usable checkpoint; starting fresh");
  return -1;
}

std::int64_t Manager::restore() { return impl_->restore(); }

}  // namespace trainrt::checkpoint
