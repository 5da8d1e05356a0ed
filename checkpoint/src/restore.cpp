// Restore (docs/checkpoint.md "Restore"): the newest step every rank can verify, checked through
// the same format checks trainrt-ckpt uses, plus what only a job knows (its registered entries).
#include <fmt/format.h>

#include <algorithm>

#include <map>
#include <set>

#include "fingerprint.hpp"
#include "layout.hpp"
#include "manager_impl.hpp"
#include "trainrt/runtime/init.hpp"
#include "trainrt/error.hpp"
#include "trainrt/kernels/cpu.hpp"

namespace trainrt::checkpoint {

using json = nlohmann::json;

namespace {

// "find 0.002 s, check 0.001 s, read 0.700 s, install 0.109 s"; a phase of a step that failed
// before `restored` names it: "read of step 50 0.310 s".
std::string phases_text(const std::vector<RestorePhase>& phases, std::int64_t restored) {
  std::string t;
  for (const auto& p : phases)
    t += fmt::format("{}{}{} {:.3f} s", t.empty() ? "" : ", ", p.name,
                     p.step < 0 || p.step == restored ? "" : fmt::format(" of step {}", p.step), p.seconds);
  return t;
}

// Whether every sharded tensor this job registers sits in the step exactly as it would be
// loaded: same world size and every rank's chunk the one it saved. Then each rank reads its own
// shard as it always did; otherwise the chunks are resharded. The same answer on every rank.
bool same_layout(const format::Manifest& m, const std::vector<format::TensorRecord>& wanted, unsigned world) {
  if (m.world_size != world) return false;
  for (const auto& w : wanted) {
    const format::TensorRecord* t = m.tensor(w.name);
    if (!t || t->dtype != w.dtype || t->global_shape != w.global_shape) return false;
    for (const auto& c : w.chunks) {
      const format::ChunkRecord* saved = m.chunk_of(*t, c.rank);
      if (!saved || saved->offsets != c.offsets || saved->shape != c.shape) return false;
    }
  }
  return true;
}

}  // namespace

std::vector<std::vector<unsigned>> Manager::Impl::shards_needed(const format::Manifest& manifest,
                                                                 const std::vector<format::TensorRecord>& wanted) {
  const unsigned world = session.size();
  const bool resize = manifest.world_size != world;
  const bool reshard = manifest.format >= 2 && !wanted.empty() && !same_layout(manifest, wanted, world);
  const bool own_shard = std::any_of(entries.begin(), entries.end(), [&](const Entry& e) { return !(e.shard && reshard); });
  std::vector<std::vector<unsigned>> out(world);
  std::unique_ptr<Reshard> plan;
  if (reshard) plan = std::make_unique<Reshard>(manifest, wanted, 0, world, opts.transfer_bytes);
  for (unsigned r = 0; r < world; ++r) {
    if (plan && plan->problem().empty()) out[r] = plan->sources(r);
    const unsigned source = resize ? 0 : r;  // as check() reads it
    if (own_shard && source < manifest.world_size && std::find(out[r].begin(), out[r].end(), source) == out[r].end())
      out[r].insert(std::lower_bound(out[r].begin(), out[r].end(), source), source);
  }
  return out;
}

std::string Manager::Impl::check(const Dir& base, std::uint64_t step, Candidate& c,
                                 const std::vector<format::TensorRecord>& wanted) {
  std::string why;
  auto dir = base.sub(format::step_dir_name(step), &why);
  if (!dir) return why;
  format::Manifest& manifest = c.manifest;
  if (why = format::read_manifest(*dir, step, manifest); !why.empty()) return why;
  const bool resize = manifest.world_size != session.size();
  // Sharded entries of a format-2 step move to their new owners unless nothing changed; a
  // format-1 step has no layout to reshard from, so its entries load only where they were saved.
  const bool reshard = manifest.format >= 2 && !wanted.empty() && !same_layout(manifest, wanted, session.size());
  auto moves = [&](const Entry& e) { return e.shard && reshard; };
  auto wrong_size = [&](std::string why) {
    if (refused_for_world_size.empty()) refused_for_world_size = fmt::format("step {}: {}", step, why);
    return why;
  };
  for (const auto& e : entries) {
    if (moves(e) || !resize || e.sharding == Sharding::Replicated) continue;
    return wrong_size(fmt::format("saved by {} ranks, this job has {}; '{}' is per-rank state, which only the same world "
                                  "size can restore (register it replicated, or as a chunk of a global tensor with a Shard)",
                                  manifest.world_size, session.size(), e.name));
  }
  c.metadata = manifest.metadata;
  if (reshard) {
    c.reshard = std::make_unique<Reshard>(manifest, wanted, session.rank(), session.size(), opts.transfer_bytes);
    if (!c.reshard->problem().empty()) return c.reshard->problem();
    if (why = c.reshard->open(*dir); !why.empty()) return why;
  }
  const bool own_shard_needed = std::any_of(entries.begin(), entries.end(), [&](const Entry& e) { return !moves(e); });
  if (!own_shard_needed) return {};
  const unsigned source = resize ? 0 : session.rank();  // replicated state at another size: rank 0's copy
  const format::ShardRecord* record = manifest.shard_of(source);
  if (!record) return fmt::format("manifest lists no shard for rank {}", source);
  if (why = c.reader.open(*dir, manifest, *record); !why.empty()) return why;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    if (moves(e)) continue;
    const format::ShardEntry* f = c.reader.find(e.name);
    if (!f) return fmt::format("{} lacks entry '{}'", c.reader.name(), e.name);
    const char* kind = e.blob ? "blob" : "buffer";
    if (f->kind != kind) return fmt::format("entry '{}' is a {} in {}, registered as a {}", e.name, f->kind, c.reader.name(), kind);
    // Another world size reads rank 0's shard for every rank: only state saved as replicated may.
    if (resize && !f->replicated)
      return wrong_size(fmt::format("entry '{}' was saved per rank by {} ranks; it cannot be restored by {}", e.name,
                                    manifest.world_size, session.size()));
    if (kind == std::string("buffer") && (f->bytes != e.bytes || f->dtype != to_string(e.dtype)))
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
  if (e.blob) return c.blobs.emplace_back(bytes).data();
  if (e.pinned || opts.verify_before_load) return reinterpret_cast<std::uint8_t*>(staged(e));
  return static_cast<std::uint8_t*>(e.data);
}

// Reads every part, verifying it as it arrives, then moves the resharded chunks (collective: every
// rank takes part whatever its own reads gave); "" or why the step is unusable here.
std::string Manager::Impl::load(Candidate& c, const std::vector<format::TensorRecord>& wanted) {
  std::string why;
  try {
    for (const auto& part : c.parts) {
      const auto bytes = static_cast<std::size_t>(part.file->bytes);
      if (why = c.reader.read_verified(*part.file, read_target(entries[part.entry], c, bytes)); !why.empty()) break;
    }
  } catch (const std::exception& e) {
    why = e.what();
  }
  if (!c.reshard) return why;
  if (!opts.host && !own_host) own_host = make_host_communicator(session);
  std::vector<std::byte*> targets;
  for (const auto& w : wanted) {
    std::byte* t = nullptr;
    for (auto& e : entries)
      if (e.shard && e.name == w.name) t = reinterpret_cast<std::byte*>(read_target(e, c, e.bytes));
    targets.push_back(t);
  }
  const auto t0 = Clock::now();
  std::string moved = c.reshard->run(opts.host ? *opts.host : *own_host, [&](std::size_t i) { return targets[i]; });
  log(fmt::format("checkpoint: resharded {} tensors in {} rounds: read {} bytes, {:.3f} s (rank {})", wanted.size(),
                  c.reshard->rounds(), c.reshard->bytes_read(), std::chrono::duration<double>(Clock::now() - t0).count(),
                  session.rank()));
  return why.empty() ? moved : why;
}

std::string Manager::Impl::check_fingerprints(Candidate& c, const std::vector<format::TensorRecord>& wanted) {
  json mine = json::object();
  std::string why;
  // The job waits for the restore: the fingerprints use every CPU this rank may run on (16 at most:
  // the sums are bound by memory bandwidth beyond that).
  const unsigned threads = layout::usable_cpus(16);
  try {
    for (auto& e : entries) {
      if (!e.shard || !c.manifest.tensor(e.name)) continue;
      const auto* data = reinterpret_cast<const std::byte*>(read_target(e, c, e.bytes));
      mine[e.name] = layout::hex(layout::chunk_fingerprint(e, data, threads));
    }
  } catch (const std::exception& ex) {
    why = ex.what();
  }
  std::map<std::string, std::uint64_t> sums;
  std::string reasons;
  for (const auto& b : session.allgather(to_blob(json{{"why", why}, {"parts", mine}}))) {
    json r = from_blob(b);
    if (!r.at("why").get<std::string>().empty()) reasons += r.at("why").get<std::string>() + "; ";
    for (const auto& [name, part] : r.at("parts").items())
      sums[name] = fingerprint::add(sums[name], layout::parse_hex(part.get<std::string>()));
  }
  for (const auto& w : wanted) {
    const format::TensorRecord* t = c.manifest.tensor(w.name);
    if (t && layout::hex(sums[w.name]) != t->fingerprint)
      reasons += fmt::format("tensor '{}': the restored content does not match its fingerprint (saved {}, restored {}); ",
                             w.name, t->fingerprint, layout::hex(sums[w.name]));
  }
  if (!reasons.empty()) reasons.resize(reasons.size() - 2);
  return reasons;
}

// Every rank verified: move what waited in staging to its owner.
void Manager::Impl::finish(Candidate& c) {
  restored_metadata = std::move(c.metadata);
  std::size_t blob = 0;
  for (auto& e : entries) {
    if (e.pinned) {
      copy_host_to_device(e.data, e.pinned, e.bytes, e.stream);
    } else if (!e.blob) {
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
  return std::any_of(entries.begin(), entries.end(), [](const Entry& e) { return !e.blob && !e.pinned; });
}

std::int64_t Manager::Impl::restore() {
  const auto t0 = Clock::now();
  auto last = t0;
  // Ends the phase that began where the one before it ended (RestorePhase): they tile the call.
  auto lap = [&](const char* name, std::int64_t step) {
    const auto now = Clock::now();
    report.phases.push_back({name, step, std::chrono::duration<double>(now - last).count()});
    last = now;
  };
  report = RestoreReport{};  // first: a call that throws leaves no phase of the one before
  join();
  ensure_tier();
  refused_for_world_size.clear();
  // A restore may read into staging (verify_before_load): never through the mapping of a tier
  // file, which holds a copy restore may still need. Mapped again at the end.
  staging.unmap();
  // The sharded layout this job registered, the same on every rank; a UsageError on every rank
  // when its chunks do not tile their tensors (nothing is read then).
  const std::vector<format::TensorRecord> wanted = layout::combine(session.allgather(layout::mine(entries)), "restore");
  // One exchange: rank 0's view of the directory decides its candidates, so all ranks walk the
  // same list; every rank's view of its node's memory tier.
  json mine = {{"rank", session.rank()}, {"tier", tier_listing()}};
  if (session.rank() == 0) {
    mine["disk"] = json::array();
    try {
      for (auto s : format::list_steps(root)) mine["disk"].push_back(s);
    } catch (const std::exception& e) {
      log(fmt::format("checkpoint: cannot list {}: {}", root.path(), e.what()));
    }
  }
  const auto gathered = session.allgather(to_blob(mine));
  std::set<std::uint64_t> disk;
  const json first = from_blob(gathered[0]);  // kept: a range-for over a temporary's member would dangle
  for (const auto& s : first.at("disk")) disk.insert(s.get<std::uint64_t>());
  Holdings held = parse_holdings(gathered);
  if (session.rank() == 0)
    for (const auto& note : held.notes) log("memory tier: " + note);
  std::set<std::uint64_t, std::greater<>> steps(disk.begin(), disk.end());
  for (const auto& [step, nodes] : held.steps) steps.insert(step);
  lap("find", -1);
  std::string overwritten_by;  // a step that failed after it was read into the registered buffers
  auto done = [&](std::uint64_t step, Candidate& c, const char* source) {
    finish(c);
    lap("install", static_cast<std::int64_t>(step));
    report.step = static_cast<std::int64_t>(step);
    report.source = source;
    report.seconds = std::chrono::duration<double>(last - t0).count();
    log(fmt::format("checkpoint: restored step {} from {} (rank {}, {:.3f} s: {}){}", step,
                    report.source == "memory" ? "the memory tier" : "the checkpoint directory", session.rank(), report.seconds,
                    phases_text(report.phases, report.step), report.source == "memory"
                        ? fmt::format("; this rank read {} shard(s) from its node, {} copied from another node; the "
                                      "job copied {} shard(s), {} bytes, between nodes{}",
                                      report.local_copies, report.moved_copies, report.job_moved_copies,
                                      report.job_moved_bytes,
                                      report.job_rebuilt_shards
                                          ? fmt::format(" and rebuilt {} from parity", report.job_rebuilt_shards)
                                          : "")
                        : ""));
    after_restore(report.source == "memory" ? std::optional<std::uint64_t>(step) : std::nullopt);
    return static_cast<std::int64_t>(step);
  };
  for (const std::uint64_t step : steps) {
    if (held.steps.count(step)) {
      Candidate c;
      bool touched = false;
      std::string why = restore_from_memory(step, held, c, wanted, touched);
      lap("memory tier", static_cast<std::int64_t>(step));
      if (why.empty()) return done(step, c, "memory");
      if (touched && loads_in_place()) overwritten_by = fmt::format("step {} from memory ({})", step, why);
      const std::string next = disk.count(step) ? "the checkpoint directory's copy of it" : "an older step";
      report.fallbacks.push_back(fmt::format("memory tier step {}: {}; trying {}", step, why, next));
      log(fmt::format("checkpoint: skipped step {} in the memory tier: {}; trying {}", step, why, next));
    }
    if (!disk.count(step)) continue;
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
    const auto at = static_cast<std::int64_t>(step);
    std::string reasons = attempt([&] { return check(root, step, c, wanted); });
    lap("check", at);
    if (reasons.empty()) {
      reasons = attempt([&] { return load(c, wanted); });
      lap("read", at);
      // The content, whatever the layout: never train on state that does not match what was saved.
      if (reasons.empty() && c.manifest.format >= 2 && !wanted.empty()) {
        reasons = check_fingerprints(c, wanted);
        lap("fingerprint", at);
      }
      if (!reasons.empty() && loads_in_place()) overwritten_by = fmt::format("step {} ({})", step, reasons);
    }
    if (!reasons.empty()) {
      report.fallbacks.push_back(fmt::format("checkpoint directory step {}: {}", step, reasons));
      log(fmt::format("checkpoint: skipped step {}: {}", step, reasons));
      continue;
    }
    return done(step, c, "disk");
  }
  report.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  after_restore(std::nullopt);
  if (!overwritten_by.empty())
    throw CheckpointError(fmt::format("no usable checkpoint, and the registered buffers hold part of {}: initialize "
                                      "them again before training from scratch (Options::verify_before_load keeps them "
                                      "untouched)",
                                      overwritten_by),
                          "checkpoint restore");
  // Every rank decides alike: one whose check failed earlier for another reason never set it.
  // Only where a step was checked (`steps` is the same on every rank): a first start, with none,
  // adds no exchange to start-up.
  std::string refused;
  if (!steps.empty())
    for (const auto& b : session.allgather(to_blob(json{{"why", refused_for_world_size}})))
      if (refused.empty()) refused = from_blob(b).at("why").get<std::string>();
  if (!refused.empty())
    throw WorldSizeError(fmt::format("no step this world can restore, and starting fresh would drop the progress of {}: "
                                     "run at the world size that saved it, or remove those steps to start over",
                                     refused),
                         "checkpoint restore");
  log("checkpoint: no usable checkpoint; starting fresh");
  return -1;
}

std::int64_t Manager::restore() { return impl_->restore(); }

}  // namespace trainrt::checkpoint
