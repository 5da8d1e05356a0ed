// The memory tier's save half (docs/checkpoint.md "Memory tier"). save()'s copy lands in this
// rank's tier file (the staging is its mapping); the writer thread then completes the file as a
// shard (header, appended entries), moves it into the node's step directory, and the ranks agree:
// when every rank's copy is complete, each node's first rank writes the step's manifest there (the
// tier's commit point, the same manifest the checkpoint directory gets). Then each rank's file is
// copied to its buddy on the next node and the ranks agree again: only then is the step
// protected against the loss of a node. Older tier steps go after that.
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <random>
#include <utility>

#include "buddy.hpp"
#include "trainrt/checkpoint/memory_tier.hpp"
#include "fingerprint.hpp"
#include "layout.hpp"
#include "manager_impl.hpp"
#include "parity.hpp"
#include "trainrt/error.hpp"
#include "trainrt/runtime/init.hpp"

namespace trainrt::checkpoint {

using json = nlohmann::json;

namespace {

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  std::string h(buf);
  return h.substr(0, h.find('.'));
}

}  // namespace

void Manager::Impl::open_tier() {
  const MemoryTier& m = opts.memory_tier;
  if (!m.enabled) {
    tier.off = "not enabled";
    return;
  }
  tier.job = m.job.empty() ? env_or("SLURM_JOB_ID", "") : m.job;
  tier.node = m.node.empty() ? env_or("SLURMD_NODENAME", host_name()) : m.node;
  if (std::string why = tier::check_name("job", tier.job); !why.empty() && !tier.job.empty()) throw UsageError(why, "memory tier");
  if (std::string why = tier::check_name("node", tier.node); !why.empty()) throw UsageError(why, "memory tier");
  if (tier.job.empty()) {
    turn_tier_off("no job id: outside Slurm set MemoryTier::job (the tier belongs to a job and outlives its steps)");
    return;
  }
  // Registration records sizes only: the staging will be the tier file (turn_tier_off undoes it).
  staging.set_file_backed(true);
  tier.pending = true;
}

std::string Manager::Impl::tier_identity() {
  // The tier belongs to this checkpoint directory as this job uses it: a token kept in the
  // directory with the job id. A later step of the job finds it; another job, or the directory
  // made anew, gets a new token, so a tier left behind (a job id Slurm reused after a reset, a
  // cleanup that never ran) is never taken for this run's state.
  constexpr const char* kName = "memory-tier-id";
  try {
    const std::string text = root.read_small(kName, 256);
    const std::string want = "job " + tier.job + "\ntoken ";
    if (text.size() == want.size() + 33 && text.compare(0, want.size(), want) == 0 && text.back() == '\n') {
      const std::string token = text.substr(want.size(), 32);
      if (token.find_first_not_of("0123456789abcdef") == std::string::npos) return token;
    }
  } catch (const Error&) {
    // none yet, or unreadable: a new one
  }
  std::random_device rd;
  const std::string token = fmt::format("{:08x}{:08x}{:08x}{:08x}", rd(), rd(), rd(), rd());
  if (write_refusal().empty()) {
    try {
      const std::string text = "job " + tier.job + "\ntoken " + token + "\n";
      root.write_new(std::string(kName) + ".tmp", {{text.data(), text.size()}});
      root.rename(std::string(kName) + ".tmp", kName);
    } catch (const Error& e) {
      log(fmt::format("memory tier: the token could not be kept in {} ({}): later steps will not find this tier",
                      root.path(), e.bare_what()));
    }
  }
  return token;
}

void Manager::Impl::ensure_tier() {
  if (!tier.pending) return;
  tier.pending = false;
  std::string token = session.rank() == 0 ? tier_identity() : std::string();
  const auto b = session.broadcast({reinterpret_cast<const std::uint8_t*>(token.data()), token.size()}, 0);
  token.assign(b.begin(), b.end());
  try {
    tier.dir = tier::NodeDir::open(opts.memory_tier.base.empty() ? default_tier_base() : opts.memory_tier.base, tier.job, token, tier.node);
  } catch (const Error& e) {
    turn_tier_off(e.what());
    return;
  }
  tier.file = format::shard_name(session.rank());
  if (session.rank() == 0) log(fmt::format("memory tier: {} (node {})", tier.dir->path(), tier.node));
}

void Manager::Impl::turn_tier_off(const std::string& why) {
  if (tier.dir && tier.file_step) {
    // This rank's copy is of no use to anyone once the tier is off: give its memory back.
    if (auto d = tier.dir->existing_step_dir(*tier.file_step)) d->unlink(tier.file);
  } else if (tier.dir) {
    tier.dir->staging().unlink(tier.file);
  }
  tier.dir.reset();
  tier.file_step.reset();
  tier.off = why;
  staging.unmap();
  staging.set_file_backed(false);
  staging.resize(staging.size());
  log(fmt::format("memory tier: off on rank {}: {}", session.rank(), why));
}

void Manager::Impl::map_tier_staging() {
  if (!tier.dir) return;
  std::vector<format::ShardEntry> shapes;
  for (const auto& e : entries) {
    format::ShardEntry s;
    s.name = e.name;
    s.kind = e.blob ? "blob" : "buffer";
    s.dtype = to_string(e.dtype);
    s.shape = e.shape;
    s.replicated = e.sharding == Sharding::Replicated;
    s.sharded = e.shard;
    shapes.push_back(std::move(s));
  }
  const std::size_t head = format::ShardWriter::header_bound(std::move(shapes));
  staging.unmap();
  // The file this rank staged into last (in the tier step it committed or restored from), so its
  // pages are reused; else a new one. A name that is not a file of ours is replaced, never used.
  Fd fd;
  std::string path, why;
  struct stat st {};
  if (tier.file_step) {
    if (auto d = tier.dir->existing_step_dir(*tier.file_step)) {
      fd = tier::open_own(*d, tier.file, st, why, true);
      path = d->path_of(tier.file);
    }
    // A committed step's file is mapped in place only when the mapping fits in it: growing it
    // (state registered since) would change a copy that step's restore still verifies. It stays
    // committed then, and the capture stages into a new file.
    if (fd && static_cast<std::uint64_t>(st.st_size) < head + staging.size()) fd.reset();
    if (!fd) tier.file_step.reset();
  }
  if (!fd) {
    fd = tier::open_own(tier.dir->staging(), tier.file, st, why, true);
    path = tier.dir->staging().path_of(tier.file);
  }
  try {
    if (!fd) fd = tier::create_own(tier.dir->staging(), tier.file);
    staging.map(std::move(fd), head, path);
  } catch (const Error& e) {
    turn_tier_off(e.what());
    return;
  }
  tier.mapped_at = registrations;
}

void Manager::Impl::prepare_tier_staging() {
  ensure_tier();
  if (!tier_off_requested.empty()) turn_tier_off(std::exchange(tier_off_requested, {}));
  if (!tier.dir) return;
  if (!staging.mapped() || tier.mapped_at != registrations) map_tier_staging();
  if (!tier.dir) return;
  std::string why;
  if (tier.file_step) {
    auto d = tier.dir->existing_step_dir(*tier.file_step);
    if (!d || !tier::move(*d, tier.file, tier.dir->staging(), tier.file, &why)) {
      log(fmt::format("memory tier: rank {}'s file left its place ({}): a new one", session.rank(), d ? why : "step gone"));
      tier.file_step.reset();
      tier.dir->staging().unlink(tier.file);
      map_tier_staging();
      return;
    }
    tier.file_step.reset();
  }
  // The mapped file must be the one in staging/ (nothing replaced or removed it in between).
  struct stat named {}, mapped {};
  if (::fstatat(tier.dir->staging().fd(), tier.file.c_str(), &named, AT_SYMLINK_NOFOLLOW) != 0 ||
      ::fstat(staging.fd(), &mapped) != 0 || named.st_ino != mapped.st_ino || named.st_dev != mapped.st_dev) {
    log(fmt::format("memory tier: rank {}'s staging file was replaced or removed: a new one", session.rank()));
    staging.unmap();
    tier.dir->staging().unlink(tier.file);
    map_tier_staging();
  }
}

Communicator& Manager::Impl::transfer_comm() {
  if (!own_host) {
    CommOptions o;
    o.timeout = std::chrono::seconds(60);
    own_host = make_host_communicator(session, o);
  }
  return *own_host;
}

Manager::Impl::TierOutcome Manager::Impl::persist_memory(std::uint64_t step, format::ShardWriter* writer,
                                                         const std::string& prepare_error, const json& fingerprints,
                                                         const Metadata& metadata) {
  const auto t0 = Clock::now();
  const unsigned rank = session.rank(), world = session.size();
  TierOutcome out;
  std::string why = !tier.dir ? tier.off : !writer ? prepare_error : std::string();
  if (why.empty()) {
    format::ShardWriter& w = *writer;
    try {
      const auto& head = w.head();
      if (!staging.mapped() || head.size() != staging.head_bytes())
        throw Error(fmt::format("the staging holds {} header bytes, the shard needs {}", staging.head_bytes(), head.size()),
                    "memory tier");
      std::memcpy(staging.head(), head.data(), head.size());
      std::uint64_t at = head.size() + staging.size();
      for (const auto& piece : w.tail()) {
        if (std::string e = pwrite_all(staging.fd(), piece.data, piece.bytes, at); !e.empty())
          throw Error(fmt::format("cannot write: {}", e), tier.dir->staging().path_of(tier.file));
        at += piece.bytes;
      }
      if (::ftruncate(staging.fd(), static_cast<off_t>(w.file_bytes())) != 0)
        throw Error(fmt::format("cannot size to {} bytes: {}", w.file_bytes(), std::strerror(errno)), tier.file);
      const Dir d = tier.dir->step_dir(step);
      if (!tier::move(tier.dir->staging(), tier.file, d, tier.file, &why)) throw Error(why, "memory tier");
      tier.file_step = step;
    } catch (const std::exception& e) {
      why = e.what();
    }
  }
  json status = {{"rank", rank},
                 {"why", why},
                 {"off", !tier.dir},
                 {"node", tier.node},
                 {"bytes", writer ? writer->file_bytes() : 0},
                 {"header_xxh3", writer ? writer->header_xxh3() : std::string()},
                 {"fingerprints", fingerprints}};
  std::vector<format::ShardRecord> shards;
  std::vector<std::string> node_names;
  std::map<std::string, std::uint64_t> sums;
  std::string failures;
  bool any_off = false;
  for (const auto& b : session.allgather(to_blob(status))) {
    json s = from_blob(b);
    const unsigned r = s.at("rank").get<unsigned>();
    node_names.push_back(s.at("node").get<std::string>());
    any_off = any_off || s.at("off").get<bool>();
    if (const auto e = s.at("why").get<std::string>(); !e.empty()) {
      failures += fmt::format("{}rank {}: {}", failures.empty() ? "" : "; ", r, e);
      continue;
    }
    shards.push_back({r, format::shard_name(r), s.at("bytes").get<std::uint64_t>(), s.at("header_xxh3").get<std::string>()});
    for (const auto& [name, part] : s.at("fingerprints").items())
      sums[name] = fingerprint::add(sums[name], layout::parse_hex(part.get<std::string>()));
  }
  if (!failures.empty()) {
    out.error = failures;
    // One rank without the tier means no step can be complete in it: off everywhere. Applied by the
    // next save (this thread's caller may still write the checkpoint directory from the mapping).
    if (any_off && tier.dir) tier_off_requested = fmt::format("another rank has no memory tier ({})", failures);
    out.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    return out;
  }
  // Node indices in order of first rank; each node's first rank writes its manifest.
  std::vector<std::string> nodes;
  std::vector<unsigned> node_of(world);
  for (unsigned r = 0; r < world; ++r) {
    auto it = std::find(nodes.begin(), nodes.end(), node_names[r]);
    node_of[r] = static_cast<unsigned>(it - nodes.begin());
    if (it == nodes.end()) nodes.push_back(node_names[r]);
  }
  std::vector<format::TensorRecord> tensors = layout;
  for (auto& t : tensors) t.fingerprint = layout::hex(sums[t.name]);
  std::string manifest_why, buddy_why;
  const bool leader = static_cast<unsigned>(std::find(node_of.begin(), node_of.end(), node_of[rank]) - node_of.begin()) == rank;
  if (leader) {
    try {
      const std::string text = format::manifest_text(step, world, shards, metadata, tensors);
      const Dir d = tier.dir->step_dir(step);
      const std::string tmp = std::string(format::kManifestName) + ".tmp";
      d.write_new(tmp, {{text.data(), text.size()}});
      d.rename(tmp, format::kManifestName);  // the tier's commit point on this node
    } catch (const std::exception& e) {
      manifest_why = e.what();
    }
  }
  const bool use_parity = opts.memory_tier.parity_group >= 2 && nodes.size() >= 2;
  const std::vector<int> buddies =
      opts.memory_tier.buddies && !use_parity ? buddy::pair(node_of) : std::vector<int>(world, -1);
  if (use_parity) buddy_why = persist_parity(step, node_of, shards);
  if (buddies[0] >= 0) {
    std::vector<buddy::Transfer> transfers;
    std::vector<Fd> copies;  // the buddy copies this rank receives, by transfer
    std::vector<std::string> names;
    try {
      const Dir d = tier.dir->step_dir(step);
      for (unsigned r = 0; r < world; ++r) {
        transfers.push_back({r, static_cast<unsigned>(buddies[r]), shards[r].bytes});
        copies.emplace_back();
        names.emplace_back();
        if (static_cast<unsigned>(buddies[r]) != rank) continue;
        // The ward's previous copy goes first: the node holds its own shards and one copy of the
        // previous node's, never two generations.
        names.back() = format::shard_name(r);
        for (const auto& s : format::list_steps(tier.dir->dir()))
          if (auto old = tier.dir->existing_step_dir(s)) old->unlink(names.back());
        copies.back() = tier::create_own(d, names.back() + ".tmp");
      }
    } catch (const std::exception& e) {
      buddy_why = e.what();
    }
    // Every rank takes part in the transfer, failed or not: nobody is left waiting.
    try {
      const auto moved = buddy::move(
          transfer_comm(), transfers, opts.transfer_bytes,
          [&](std::size_t, std::uint64_t at, std::byte* dst, std::size_t n) { return pread_all(staging.fd(), dst, n, at); },
          [&](std::size_t i, std::uint64_t at, const std::byte* src, std::size_t n) {
            return copies[i] ? pwrite_all(copies[i].get(), src, n, at) : std::string("no file to write into");
          });
      if (buddy_why.empty()) buddy_why = moved.why;
      const Dir d = tier.dir->step_dir(step);
      for (std::size_t i = 0; i < copies.size() && buddy_why.empty(); ++i)
        if (copies[i] && !tier::move(d, names[i] + ".tmp", d, names[i], &buddy_why)) break;
    } catch (const std::exception& e) {
      if (buddy_why.empty()) buddy_why = e.what();
    }
  }
  json second = {{"rank", rank}, {"manifest", manifest_why}, {"buddy", buddy_why}};
  std::string manifest_failures, buddy_failures;
  for (const auto& b : session.allgather(to_blob(second))) {
    json s = from_blob(b);
    const unsigned r = s.at("rank").get<unsigned>();
    if (const auto e = s.at("manifest").get<std::string>(); !e.empty())
      manifest_failures += fmt::format("{}rank {}: {}", manifest_failures.empty() ? "" : "; ", r, e);
    if (const auto e = s.at("buddy").get<std::string>(); !e.empty())
      buddy_failures += fmt::format("{}rank {}: {}", buddy_failures.empty() ? "" : "; ", r, e);
  }
  if (use_parity && !buddy_failures.empty()) {
    // A parity that took a failed sender's zeros for its blocks must never be used: it goes.
    try {
      if (auto d = tier.dir->existing_step_dir(step)) d->unlink(parity::file_name(rank));
    } catch (const std::exception&) {
      // the step is not protected either way (logged below)
    }
  }
  out.committed = manifest_failures.empty();
  out.buddies = out.committed && (buddies[0] >= 0 || use_parity) && buddy_failures.empty();
  out.error = manifest_failures;
  if (!buddy_failures.empty() && rank == 0)
    log(fmt::format("memory tier: step {}: {} incomplete ({}): a lost node falls back to the directory", step,
                    use_parity ? "parity" : "buddy copies", buddy_failures));
  if (out.committed && leader) tier.dir->remove_steps_except(step, opts.log);
  out.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return out;
}

}  // namespace trainrt::checkpoint
