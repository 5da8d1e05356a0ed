// The commit protocol (docs/checkpoint.md "Save"). One commit point: the rename of the step's
// MANIFEST.json. Before it, a failure removes what this save wrote and nothing else; after it,
// the step is never rewritten and its shards are never removed except by retention, which first
// takes the manifest away. A step whose MANIFEST.json exists is not saved again.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>

#include <map>

#include "fingerprint.hpp"
#include "layout.hpp"
#include "commit.hpp"
#include "manager_impl.hpp"
#include "trainrt/error.hpp"

namespace trainrt::checkpoint {

using json = nlohmann::json;
using format::kManifestName;
using format::shard_name;
using format::step_dir_name;

namespace {
const std::string kManifestTmp = std::string(kManifestName) + ".tmp";
const std::string kLatestTmp = std::string(format::kLatestName) + ".tmp";
}  // namespace

bootstrap::Blob to_blob(const json& j) {
  std::string s = j.dump(-1, ' ', false, json::error_handler_t::replace);
  return bootstrap::Blob(s.begin(), s.end());
}
json from_blob(const bootstrap::Blob& b) { return json::parse(std::string(b.begin(), b.end())); }

std::string write_refusal(const Dir& root) {
  const struct stat st = root.stat();
  const uid_t me = ::geteuid();
  if (st.st_uid != me)
    return fmt::format("the checkpoint directory {} is owned by uid {}, not by this process (uid {}): saving there is "
                       "refused (restore still reads it); use a directory of your own",
                       root.path(), st.st_uid, me);
  if (st.st_mode & S_IWOTH)
    return fmt::format("the checkpoint directory {} is writable by others (mode {:o}): saving there is refused; "
                       "chmod o-w it",
                       root.path(), st.st_mode & 07777);
  return {};
}

std::string Manager::Impl::write_refusal() const { return checkpoint::write_refusal(root); }

bool Manager::Impl::has_manifest(std::uint64_t step) const {
  auto dir = root.sub(step_dir_name(step));
  return dir && dir->exists(kManifestName);
}

std::unique_ptr<format::ShardWriter> Manager::Impl::prepare_shard(std::uint64_t step, json& fingerprints) {
  // This rank's share of each sharded tensor's fingerprint, from the staged copy (restore checks
  // the reassembled content against their sum, whatever the layout then).
  fingerprints = json::object();
  for (const auto& e : entries)
    if (e.shard) fingerprints[e.name] = layout::hex(layout::chunk_fingerprint(e, staged(e)));
  // Layout: the host-buffer staging as it is (page-aligned, whole pages: written around the page
  // cache), then device buffers and blobs. Readers go by each entry's offset.
  auto w = std::make_unique<format::ShardWriter>(step, session.rank(), session.size(), staging.data(), staging.size());
  std::size_t blob_index = 0;
  for (const auto& e : entries) {
    const bool replicated = e.sharding == Sharding::Replicated;
    if (!e.blob && !e.pinned) {
      w->place(e.name, false, e.dtype, e.shape, replicated, e.staging_offset, e.bytes, e.shard);
    } else if (!e.blob) {
      w->append(e.name, false, e.dtype, e.shape, replicated, e.pinned, e.bytes, e.shard);
    } else {
      const auto& b = blob_staging[blob_index++];
      w->append(e.name, true, e.dtype, e.shape, replicated, b.data(), b.size());
    }
  }
  // The memory tier's file reserved its header pages: the same header goes to the directory, so
  // both hold the same bytes and one manifest describes either.
  w->finish(staging.mapped() ? staging.head_bytes() : 0);
  return w;
}

SaveResult Manager::Impl::write_shard(std::uint64_t step, const Dir& dir, const format::ShardWriter& w) {
  const auto t0 = Clock::now();
  const std::string name = shard_name(session.rank());
  dir.write_new(name + ".tmp", w.pieces());
  dir.rename(name + ".tmp", name);  // the step is not committed: renaming over a leftover is fine
  dir.fsync();
  SaveResult r;
  r.step = step;
  r.shard_bytes = w.file_bytes();
  r.persist_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return r;
}

void commit_manifest(const Dir& root, const Dir& dir, std::uint64_t step, const std::string& text, const Log& log) {
  auto say = [&](const std::string& m) {
    if (log) log(m);
  };
  try {
    dir.write_new(kManifestTmp, {{text.data(), text.size()}});
    dir.rename(kManifestTmp, kManifestName);  // the commit point
  } catch (...) {
    dir.unlink(kManifestTmp);
    throw;
  }
  // `latest` is a convenience pointer for people and tools; restore does not depend on it, so a
  // failure to write it does not undo the commit.
  try {
    const std::string pointer = format::latest_text(step);
    root.write_new(kLatestTmp, {{pointer.data(), pointer.size()}});
    root.rename(kLatestTmp, format::kLatestName);
  } catch (const Error& e) {
    root.unlink(kLatestTmp);
    say(fmt::format("checkpoint: step {} committed, but the latest pointer was not updated: {}", step, e.what()));
  }
  // Durable: the manifest's name in the step directory, the step directory's name (and `latest`)
  // in the checkpoint directory. One fsync each, as many as before the commit point moved here.
  try {
    dir.fsync();
    root.fsync();
  } catch (const Error& e) {
    // Not known to be durable. Take the commit back while that is still possible; when even the
    // unlink fails, the step stays committed with every shard in place.
    if (dir.unlink(kManifestName)) {
      try {
        dir.fsync();
      } catch (const Error&) {
      }
      throw CheckpointError(fmt::format("the commit could not be made durable ({}), and was taken back", e.bare_what()),
                            dir.path());
    }
    say(fmt::format("checkpoint: step {} committed, but syncing it failed: {}", step, e.what()));
  }
}

// Rank 0, once every rank has synced its shard. Throws only while the step is not committed.
void Manager::Impl::commit(std::uint64_t step, const Dir& dir, const std::vector<format::ShardRecord>& shards,
                           const Metadata& metadata) {
  // `layout` carries the fingerprints persist() summed; the manifest's tensor table is it.
  commit_manifest(root, dir, step, format::manifest_text(step, session.size(), shards, metadata, layout), opts.log);
}

// A step that was not committed: this rank's files of it go, and the directory if it is empty.
void Manager::Impl::discard(std::uint64_t step) {
  const std::string name = step_dir_name(step);
  auto dir = root.sub(name);
  if (!dir) return;
  if (dir->exists(kManifestName)) return;  // committed after all (never by this save): not ours to touch
  if (dir->stat().st_uid != ::geteuid()) return;  // another user's directory: this save wrote nothing there
  dir->unlink(shard_name(session.rank()));
  dir->unlink(shard_name(session.rank()) + ".tmp");
  if (session.rank() == 0) dir->unlink(kManifestTmp);
  root.rmdir(name);  // fails while other ranks' files remain: the last one out removes it
}

namespace {

void remove_step(const Dir& root, const std::string& name, const Dir& dir, const Log& log) {
  // The manifest first: a removal cut short (the process exits) leaves an uncommitted step, which
  // restore skips, never a committed one with shards missing.
  dir.unlink(kManifestName);
  try {
    dir.fsync();
  } catch (const Error&) {
  }
  // Names are unlinked inside the directory that was opened (a subdirectory planted there is
  // left alone: unlinkat without AT_REMOVEDIR refuses it), so nothing outside is reached.
  for (const auto& n : dir.names()) dir.unlink(n);
  if (!root.rmdir(name) && log) log(fmt::format("checkpoint: could not remove {} (something not written by trainrt is in it)", dir.path()));
}

}  // namespace

// Deleting old steps is not part of making `step` durable (unlinking a large shard takes tens of
// ms), so a save's future does not wait for it.
// Only steps with a usable manifest count towards keep_last; older uncommitted or unusable steps
// are leftovers of failed saves and go. Directories owned by someone else are never touched.
void retire_older_than(const Dir& root, std::uint64_t step, unsigned keep_last, const Log& log) {
  auto say = [&](const std::string& m) {
    if (log) log(m);
  };
  const unsigned keep = std::max(1u, keep_last);
  unsigned kept = 0;
  const uid_t me = ::geteuid();
  for (std::uint64_t s : format::list_steps(root)) {
    if (s > step) continue;
    const std::string name = step_dir_name(s);
    auto dir = root.sub(name);
    if (!dir) continue;  // replaced by something else since it was listed: not ours
    if (dir->stat().st_uid != me) {
      say(fmt::format("checkpoint: left {} alone (owned by uid {})", dir->path(), dir->stat().st_uid));
      continue;
    }
    format::Manifest m;
    const bool usable = s == step || format::read_manifest(*dir, s, m).empty();
    if (usable && kept < keep) {
      ++kept;
      continue;
    }
    remove_step(root, name, *dir, log);
    say(fmt::format("checkpoint: removed step {} ({}, keep_last={})", s, usable ? "older than the kept steps" : "never committed",
                    keep_last));
  }
  root.fsync();
}

// Rank 0, after the commit was announced.
void Manager::Impl::retire_older_than(std::uint64_t step) { checkpoint::retire_older_than(root, step, opts.keep_last, opts.log); }

bool Manager::Impl::committed_and_layout_agreed(std::uint64_t step, bool to_disk) {
  // Rank 0 learns whether anyone registered something since the layout was last agreed, and
  // whether every rank has the memory tier enabled (a save goes to the tier only then), and tells
  // everyone that and whether the step is committed: a gather and a broadcast, so no rank reads
  // every rank's answer (an allgather costs each rank one read per rank).
  const json mine = {{"changed", layout_checked_at != registrations}, {"tier", opts.memory_tier.enabled}};
  const auto answers = session.gather(to_blob(mine), 0);
  json verdict;
  if (session.rank() == 0) {
    try {
      bool changed = false, tier = true;
      for (const auto& b : answers) {
        const json r = from_blob(b);
        changed = changed || r.at("changed").get<bool>();
        tier = tier && r.at("tier").get<bool>();
      }
      verdict = {{"committed", has_manifest(step)}, {"changed", changed}, {"tier", tier}};
    } catch (const std::exception& e) {
      verdict = {{"error", e.what()}};  // every rank fails alike, none waits for a verdict
    }
  }
  verdict = from_blob(session.broadcast(to_blob(verdict), 0));
  if (verdict.contains("error"))
    throw Error(fmt::format("rank 0 could not tell whether step {} is committed: {}", step, verdict.at("error").get<std::string>()),
                "checkpoint");
  const bool committed = verdict.at("committed").get<bool>(), changed = verdict.at("changed").get<bool>();
  tier_everywhere = verdict.at("tier").get<bool>();
  if (opts.memory_tier.enabled && !tier_everywhere && tier.dir)
    tier_off_requested = "the memory tier is not enabled on every rank";
  if ((committed && to_disk) || !changed) return committed;  // nothing is written, or nothing changed
  layout = layout::combine(session.allgather(layout::mine(entries)), "save");  // UsageError on every rank alike
  layout_checked_at = registrations;
  return false;
}

void Manager::Impl::persist(std::uint64_t step, double stall, Clock::time_point t0, const Metadata& metadata,
                            const std::shared_ptr<std::promise<SaveResult>>& promise, bool to_disk) {
  const unsigned rank = session.rank();
  try {
    if (committed_and_layout_agreed(step, to_disk) && to_disk) {
      log(fmt::format("checkpoint: step {} is already committed; left as it is (a committed step is never rewritten)", step));
      SaveResult r;
      r.step = step;
      r.stall_seconds = stall;
      r.already_committed = true;
      promise->set_value(r);
      return;
    }
  } catch (...) {
    promise->set_exception(std::current_exception());
    return;
  }
  std::unique_ptr<format::ShardWriter> w;
  json fingerprints;
  std::string prepare_error;
  std::exception_ptr prepare_failure;
  try {
    w = prepare_shard(step, fingerprints);
  } catch (const std::exception& e) {
    prepare_error = e.what();
    prepare_failure = std::current_exception();
  }
  TierOutcome memory;
  if (tier_everywhere) memory = persist_memory(step, w.get(), prepare_error, fingerprints, metadata);
  if (tier_everywhere && rank == 0)
    log(fmt::format("memory tier: step {} {} ({:.3f} s){}", step,
                    memory.committed ? (memory.buddies ? (opts.memory_tier.parity_group >= 2 ? "in memory on every node, with parity"
                                                                                       : "in memory on every node, with buddy copies")
                                        : "in memory on every node")
                                     : "not in memory: " + memory.error,
                    memory.seconds, to_disk ? "" : ", snapshot"));
  if (!to_disk) {
    if (!memory.committed) {
      promise->set_exception(std::make_exception_ptr(CheckpointError(
          fmt::format("step {} not in the memory tier: {}", step, tier_everywhere ? memory.error : "it is not enabled on every rank"),
          "checkpoint snapshot")));
      return;
    }
    SaveResult r;
    r.step = step;
    r.stall_seconds = stall;
    r.shard_bytes = w ? w->file_bytes() : 0;
    r.in_memory = true;
    r.buddy_protected = memory.buddies;
    r.memory_seconds = memory.seconds;
    promise->set_value(r);
    return;
  }
  const std::string dir_name = step_dir_name(step);
  SaveResult result;
  json status;
  std::optional<Dir> dir;
  try {
    if (!w) std::rethrow_exception(prepare_failure);  // its own type: a UsageError stays one
    if (std::string why = write_refusal(); !why.empty()) throw CheckpointError(why, "checkpoint");
    dir = root.sub_or_create(dir_name);
    if (dir->stat().st_uid != ::geteuid())
      throw CheckpointError(fmt::format("{} is owned by uid {}, not by this process: refusing to write into it",
                                        dir->path(), dir->stat().st_uid),
                            "checkpoint");
    result = write_shard(step, *dir, *w);
    status = {{"ok", true},
              {"rank", rank},
              {"bytes", result.shard_bytes},
              {"header_xxh3", w->header_xxh3()},
              {"fingerprints", fingerprints}};
  } catch (const std::exception& e) {
    status = {{"ok", false}, {"rank", rank}, {"error", e.what()}};
  }
  try {
    // Every rank reaches this agreement, failed or not, so nobody waits for a rank that gave up.
    // Only rank 0 reads the statuses (it writes the manifest); the others learn its decision.
    const auto statuses = session.gather(to_blob(status), 0);
    json commit_status = {{"ok", true}, {"error", ""}};
    if (rank == 0) {
      try {
        std::vector<format::ShardRecord> shards;
        std::string failures;
        std::map<std::string, std::uint64_t> fingerprint_sums;  // per tensor, over every rank's share
        for (const auto& b : statuses) {
          json s = from_blob(b);
          const unsigned r = s.at("rank").get<unsigned>();
          if (s.at("ok").get<bool>()) {
            shards.push_back({r, shard_name(r), s.at("bytes").get<std::uint64_t>(), s.at("header_xxh3").get<std::string>()});
            for (const auto& [name, part] : s.at("fingerprints").items())
              fingerprint_sums[name] = fingerprint::add(fingerprint_sums[name], layout::parse_hex(part.get<std::string>()));
          } else
            failures += fmt::format("{}rank {}: {}", failures.empty() ? "" : "; ", r, s.at("error").get<std::string>());
        }
        std::sort(shards.begin(), shards.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
        for (auto& t : layout) t.fingerprint = layout::hex(fingerprint_sums[t.name]);
        if (!failures.empty()) commit_status = {{"ok", false}, {"error", failures}};
        else commit(step, *dir, shards, metadata);
      } catch (const std::exception& e) {
        commit_status = {{"ok", false}, {"error", fmt::format("rank 0 could not commit: {}", e.what())}};
      }
    }
    json decided = from_blob(session.broadcast(to_blob(commit_status), 0));
    if (!decided.at("ok").get<bool>()) {
      discard(step);  // the step never had a manifest: leave nothing of it behind
      throw CheckpointError(fmt::format("step {} not committed: {}", step, decided.at("error").get<std::string>()),
                            "checkpoint");
    }
    result.step = step;
    result.stall_seconds = stall;
    result.persist_seconds = std::chrono::duration<double>(Clock::now() - t0).count() - stall;
    result.in_memory = memory.committed;
    result.buddy_protected = memory.buddies;
    result.memory_seconds = memory.seconds;
    log(fmt::format("checkpoint: step {} committed ({} bytes on rank {}, stall {:.3f} s, persist {:.3f} s)", step,
                    result.shard_bytes, rank, stall, result.persist_seconds));
    promise->set_value(result);
  } catch (...) {
    promise->set_exception(std::current_exception());
    return;
  }
  if (rank == 0) {
    try {
      retire_older_than(step);
    } catch (const std::exception& e) {
      log(fmt::format("checkpoint: could not remove steps older than {}: {}", step, e.what()));
    }
  }
}

}  // namespace trainrt::checkpoint
