// Restoring from the memory tier (docs/checkpoint.md "Memory tier"). Every rank lists its node's
// tier; a step is a candidate when some node holds its manifest. For a candidate, every node must
// end up holding each shard its ranks read: a node that lacks one (a spare, a node whose own copy
// failed) first receives it from a node that has it (its buddy copy), and a node without the
// manifest receives that. Then each rank loads from its node's tier exactly as from the
// checkpoint directory: every check, every checksum, and the fingerprints. A rank whose load
// fails marks the copies it read as bad and the step is tried again with other copies (the
// node's own first, then a buddy's); when no verified copy is left the caller falls back to the
// checkpoint directory, with the reason.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <set>

#include "buddy.hpp"
#include "manager_impl.hpp"
#include "trainrt/error.hpp"
#include "trainrt/runtime/init.hpp"
#include "xxh3.hpp"

namespace trainrt::checkpoint {

using json = nlohmann::json;

namespace {

// Every rank's problem, indexed by rank ("" where none).
std::vector<std::string> gather_why(bootstrap::Session& session, const std::string& why) {
  std::vector<std::string> out;
  for (const auto& b : session.allgather(to_blob(json{{"why", why}}))) out.push_back(from_blob(b).at("why").get<std::string>());
  return out;
}

std::string join_why(const std::vector<std::string>& whys) {
  std::string out;
  for (unsigned r = 0; r < whys.size(); ++r)
    if (!whys[r].empty()) out += fmt::format("{}rank {}: {}", out.empty() ? "" : "; ", r, whys[r]);
  return out;
}

std::string run(const std::function<std::string()>& f) {
  try {
    return f();
  } catch (const std::exception& e) {
    return e.what();
  }
}

}  // namespace

json Manager::Impl::tier_listing() {
  json t = {{"on", tier.dir.has_value()}, {"off", tier.off}, {"node", tier.node}, {"steps", json::array()}};
  if (!tier.dir) return t;
  std::vector<std::string> notes;
  try {
    for (const auto& s : tier.dir->inventory(notes)) {
      json parity = json::array();
      for (const auto& p : s.parity)
        parity.push_back({{"members", p.members}, {"holder", p.holder}, {"block", p.block}, {"xxh3", p.xxh3}});
      t["steps"].push_back(
          {{"step", s.step}, {"xxh3", s.manifest_xxh3}, {"world", s.world_size}, {"ranks", s.ranks}, {"parity", parity}});
    }
  } catch (const std::exception& e) {
    notes.push_back(e.what());
  }
  t["notes"] = notes;
  return t;
}

Manager::Impl::Holdings Manager::Impl::parse_holdings(const std::vector<bootstrap::Blob>& gathered) {
  Holdings h;
  const unsigned world = static_cast<unsigned>(gathered.size());
  h.off.resize(world);
  h.node_of.resize(world);
  std::vector<json> tiers;
  for (unsigned r = 0; r < world; ++r) {
    tiers.push_back(from_blob(gathered[r]).at("tier"));
    const json& t = tiers.back();
    if (!t.at("on").get<bool>()) h.off[r] = t.at("off").get<std::string>();
    const std::string node = t.at("node").get<std::string>();
    auto it = std::find(h.nodes.begin(), h.nodes.end(), node);
    h.node_of[r] = static_cast<unsigned>(it - h.nodes.begin());
    if (it == h.nodes.end()) {
      h.nodes.push_back(node);
      h.leader.push_back(r);
    }
  }
  // Ranks of one node list the same directory: its leader's listing stands for the node.
  for (unsigned n = 0; n < h.nodes.size(); ++n) {
    const json& t = tiers[h.leader[n]];
    if (!t.at("on").get<bool>()) continue;
    for (const auto& note : t.value("notes", json::array())) h.notes.push_back(h.nodes[n] + ": " + note.get<std::string>());
    for (const auto& s : t.at("steps")) {
      tier::StepFiles f;
      f.step = s.at("step").get<std::uint64_t>();
      f.manifest_xxh3 = s.at("xxh3").get<std::string>();
      f.world_size = s.at("world").get<unsigned>();
      f.ranks = s.at("ranks").get<std::vector<unsigned>>();
      for (const auto& p : s.value("parity", json::array())) {
        parity::Header hp;
        hp.step = f.step;
        hp.members = p.at("members").get<std::vector<unsigned>>();
        hp.holder = p.at("holder").get<unsigned>();
        hp.block = p.at("block").get<std::uint64_t>();
        hp.xxh3 = p.at("xxh3").get<std::string>();
        f.parity.push_back(std::move(hp));
      }
      auto& per_node = h.steps[f.step];
      per_node.resize(h.nodes.size());
      per_node[n] = std::move(f);
    }
  }
  // A step no node holds the manifest of was never committed: not a candidate. Where some node
  // does, the others' files (no manifest there) count once restore has copied it to them.
  std::erase_if(h.steps, [](const auto& step) {
    return std::none_of(step.second.begin(), step.second.end(), [](const auto& f) { return f && !f->manifest_xxh3.empty(); });
  });
  return h;
}

// plan_parity_rebuild()'s answer when no parity file names the shard: no reason to add.
constexpr const char* kNoParity = "no parity covers it";

std::string Manager::Impl::restore_from_memory(std::uint64_t step, Holdings& h, Candidate& c,
                                               const std::vector<format::TensorRecord>& wanted, bool& touched) {
  const unsigned rank = session.rank(), world = session.size(), me_node = h.node_of[rank];
  const unsigned nodes = static_cast<unsigned>(h.nodes.size());
  std::vector<std::optional<tier::StepFiles>>& held = h.steps[step];
  held.resize(nodes);
  for (unsigned r = 0; r < world; ++r)
    if (!h.off[r].empty()) return fmt::format("the memory tier is off on rank {} ({})", r, h.off[r]);
  // The manifest: every node that holds one must hold the same bytes.
  std::optional<unsigned> source_node;
  auto has_manifest = [&](unsigned n) { return held[n] && !held[n]->manifest_xxh3.empty(); };
  for (unsigned n = 0; n < nodes; ++n) {
    if (!has_manifest(n)) continue;
    if (!source_node) source_node = n;
    else if (held[n]->manifest_xxh3 != held[*source_node]->manifest_xxh3)
      return fmt::format("the manifests of nodes {} and {} differ", h.nodes[*source_node], h.nodes[n]);
  }
  if (!source_node) return "no node holds its manifest";
  const std::string wanted_xxh3 = held[*source_node]->manifest_xxh3;
  // Nodes without it (a spare, a node the job ended on before it wrote it) get the bytes the
  // others hold, checked against their hash.
  std::vector<bool> lacked(nodes);
  for (unsigned n = 0; n < nodes; ++n) lacked[n] = !has_manifest(n);
  if (std::find(lacked.begin(), lacked.end(), true) != lacked.end()) {
    const unsigned from = h.leader[*source_node];
    std::string text;
    if (rank == from) {
      std::string ignored = run([&] {
        text = tier.dir->existing_step_dir(step).value().read_small(format::kManifestName, format::kMaxManifestBytes);
        return std::string();
      });
    }
    const bootstrap::Blob b = session.broadcast({reinterpret_cast<const std::uint8_t*>(text.data()), text.size()}, from);
    text.assign(b.begin(), b.end());
    std::string why;
    if (rank == h.leader[me_node] && lacked[me_node]) {
      why = run([&] {
        if (fmt::format("{:016x}", XXH3_64bits(text.data(), text.size())) != wanted_xxh3)
          return fmt::format("the manifest from {} does not match its hash", h.nodes[*source_node]);
        const Dir d = tier.dir->step_dir(step);
        const std::string tmp = std::string(format::kManifestName) + ".tmp";
        d.write_new(tmp, {{text.data(), text.size()}});
        d.rename(tmp, format::kManifestName);
        return std::string();
      });
    }
    if (std::string all = join_why(gather_why(session, why)); !all.empty()) return all;
    // A node's own files stay listed (shards below the step's world size; a parity file is only
    // used where the manifest was when it was listed): the load checks them like any others.
    const unsigned step_world = held[*source_node]->world_size;
    for (unsigned n = 0; n < nodes; ++n) {
      if (!lacked[n]) continue;
      std::vector<unsigned> own;
      if (held[n])
        std::copy_if(held[n]->ranks.begin(), held[n]->ranks.end(), std::back_inserter(own), [&](unsigned r) { return r < step_world; });
      held[n] = tier::StepFiles{step, wanted_xxh3, step_world, std::move(own), {}};
    }
  }
  format::Manifest manifest;
  {
    std::string why = run([&] {
      const auto d = tier.dir->existing_step_dir(step);
      return d ? format::read_manifest(*d, step, manifest) : std::string("its directory is gone");
    });
    if (std::string all = join_why(gather_why(session, why)); !all.empty()) return all;
  }
  const auto needed = shards_needed(manifest, wanted);
  // Which copies are known bad, per node and saved rank; and where each node's copy came from.
  std::set<std::pair<unsigned, unsigned>> bad;
  std::map<std::pair<unsigned, unsigned>, unsigned> origin;
  auto has = [&](unsigned n, unsigned s) {
    const auto& r = held[n]->ranks;
    return std::binary_search(r.begin(), r.end(), s) && !bad.count({n, s});
  };
  std::string last_why;
  std::set<unsigned> no_rebuild;  // shards whose rebuild from parity failed or did not verify
  std::set<unsigned> rebuilt;     // shards rebuilt from parity in this restore
  for (unsigned attempt = 0; attempt <= nodes; ++attempt) {
    // The copies each node lacks, and a node to take each from (in node order: the buddy copy
    // usually sits on the next node, any verified copy serves).
    std::vector<buddy::Transfer> transfers;
    std::vector<unsigned> shard_of, from_node;
    std::vector<ParityRebuild> rebuilds;
    std::string missing;
    for (unsigned n = 0; n < nodes; ++n) {
      std::set<unsigned> want;
      for (unsigned r = 0; r < world; ++r)
        if (h.node_of[r] == n) want.insert(needed[r].begin(), needed[r].end());
      for (unsigned s : want) {
        if (has(n, s)) {
          origin.try_emplace({n, s}, n);
          continue;
        }
        std::optional<unsigned> y;
        for (unsigned k = 1; k < nodes && !y; ++k)
          if (has((n + k) % nodes, s)) y = (n + k) % nodes;
        std::vector<unsigned> senders, receivers;
        for (unsigned r = 0; r < world; ++r) {
          if (y && h.node_of[r] == *y) senders.push_back(r);
          if (h.node_of[r] == n && std::binary_search(needed[r].begin(), needed[r].end(), s)) receivers.push_back(r);
        }
        if (!y) {
          std::string parity_why = no_rebuild.count(s) ? "its rebuild from parity failed" : "";
          if (parity_why.empty()) {
            if (auto plan = plan_parity_rebuild(s, held, has, manifest, parity_why)) {
              plan->node = n;
              plan->receiver = receivers.front();
              rebuilds.push_back(std::move(*plan));
              continue;
            }
          }
          // What the inventories said about that file, when they skipped it (a planted symlink...).
          std::string seen;
          for (const auto& note : h.notes)
            if (note.find("/" + format::shard_name(s)) != std::string::npos || note.find("/parity_") != std::string::npos)
              seen += "; " + note;
          if (parity_why != kNoParity) seen += "; " + parity_why;
          missing += fmt::format("{}rank {}'s shard (for node {}){}", missing.empty() ? "" : ", ", s, h.nodes[n], seen);
          continue;
        }
        transfers.push_back({senders[s % senders.size()], receivers.front(), manifest.shards[s].bytes});
        shard_of.push_back(s);
        from_node.push_back(*y);
      }
    }
    if (!missing.empty())
      return fmt::format("no verified copy left in memory of {}{}", missing, last_why.empty() ? "" : " (" + last_why + ")");
    if (!transfers.empty()) {
      const auto t_move = Clock::now();
      std::vector<Fd> sources(transfers.size()), copies(transfers.size());
      std::string why = run([&] {
        std::string first;
        const auto d = tier.dir->existing_step_dir(step);
        if (!d) return std::string("its directory is gone");
        for (std::size_t i = 0; i < transfers.size(); ++i) {
          const std::string name = format::shard_name(shard_of[i]);
          if (transfers[i].from == rank) {
            struct stat st {};
            std::string e;
            sources[i] = tier::open_own(*d, name, st, e, false);
            if (sources[i] && static_cast<std::uint64_t>(st.st_size) != transfers[i].bytes)
              e = fmt::format("{} is {} bytes, the manifest says {}", d->path_of(name), st.st_size, transfers[i].bytes);
            if (!e.empty()) sources[i].reset();
            if (!e.empty() && first.empty()) first = e;
          }
          if (transfers[i].to == rank) copies[i] = tier::create_own(*d, name + ".tmp");
        }
        return first;
      });
      if (!opts.host && !own_host) transfer_comm();
      const auto moved = buddy::move(
          opts.host ? *opts.host : *own_host, transfers, opts.transfer_bytes,
          [&](std::size_t i, std::uint64_t at, std::byte* dst, std::size_t n) -> std::string {
            if (!sources[i]) return "no source";
            const ssize_t got = ::pread(sources[i].get(), dst, n, static_cast<off_t>(at));
            return got == static_cast<ssize_t>(n) ? std::string() : fmt::format("short read at byte {}", at);
          },
          [&](std::size_t i, std::uint64_t at, const std::byte* src, std::size_t n) -> std::string {
            const ssize_t put = ::pwrite(copies[i].get(), src, n, static_cast<off_t>(at));
            return put == static_cast<ssize_t>(n) ? std::string() : fmt::format("cannot write: {}", std::strerror(errno));
          });
      if (why.empty()) why = moved.why;
      if (why.empty())
        why = run([&] {
          const auto d = tier.dir->existing_step_dir(step).value();
          std::string e;
          for (std::size_t i = 0; i < transfers.size(); ++i)
            if (transfers[i].to == rank && !tier::move(d, format::shard_name(shard_of[i]) + ".tmp", d, format::shard_name(shard_of[i]), &e))
              return e;
          return e;
        });
      const auto whys = gather_why(session, why);
      if (std::string all = join_why(whys); !all.empty()) {
        // A sender whose copy could not be read, or a receiver that could not write it: that
        // copy is out; the next attempt takes another.
        for (std::size_t i = 0; i < transfers.size(); ++i)
          if (!whys[transfers[i].from].empty() || !whys[transfers[i].to].empty()) bad.insert({from_node[i], shard_of[i]});
        last_why = all;
        continue;
      }
      std::uint64_t bytes = 0;
      for (const auto& t : transfers) bytes += t.bytes;
      if (rank == 0)
        log(fmt::format("memory tier: step {}: {} shard(s) copied between nodes, {} bytes in {:.3f} s", step, transfers.size(),
                        bytes, std::chrono::duration<double>(Clock::now() - t_move).count()));
      for (std::size_t i = 0; i < transfers.size(); ++i) {
        const unsigned to_node = h.node_of[transfers[i].to];
        auto& ranks = held[to_node]->ranks;
        if (!std::binary_search(ranks.begin(), ranks.end(), shard_of[i]))
          ranks.insert(std::lower_bound(ranks.begin(), ranks.end(), shard_of[i]), shard_of[i]);
        bad.erase({to_node, shard_of[i]});
        origin[{to_node, shard_of[i]}] = from_node[i];
        report.moved_copies += transfers[i].to == rank ? 1 : 0;
        report.job_moved_copies += 1;
        report.job_moved_bytes += transfers[i].bytes;
      }
    }
    if (!rebuilds.empty()) {
      const auto t_rebuild = Clock::now();
      const std::string all = join_why(gather_why(session, run([&] { return run_parity_rebuilds(step, h, rebuilds); })));
      if (!all.empty()) {
        // A rebuilt file may hold a failed sender's zeros: it goes, and is not rebuilt again.
        for (const auto& p : rebuilds) {
          no_rebuild.insert(p.shard);
          if (p.receiver == rank) run([&] {
            if (auto d = tier.dir->existing_step_dir(step)) d->unlink(format::shard_name(p.shard));
            return std::string();
          });
        }
        last_why = all;
        continue;
      }
      std::uint64_t bytes = 0;
      for (const auto& p : rebuilds) {
        auto& ranks = held[p.node]->ranks;
        if (!std::binary_search(ranks.begin(), ranks.end(), p.shard))
          ranks.insert(std::lower_bound(ranks.begin(), ranks.end(), p.shard), p.shard);
        bad.erase({p.node, p.shard});
        origin[{p.node, p.shard}] = p.node;
        rebuilt.insert(p.shard);
        bytes += p.bytes;
        report.job_rebuilt_shards += 1;
      }
      if (rank == 0)
        log(fmt::format("memory tier: step {}: {} shard(s) rebuilt from parity, {} bytes in {:.3f} s", step, rebuilds.size(),
                        bytes, std::chrono::duration<double>(Clock::now() - t_rebuild).count()));
    }
    // Load from this node's tier exactly as from the directory.
    c = Candidate{};
    const Dir& base = tier.dir->dir();
    auto whys = gather_why(session, run([&] { return check(base, step, c, wanted); }));
    if (join_why(whys).empty()) {
      touched = true;
      whys = gather_why(session, run([&] { return load(c, wanted); }));
      if (join_why(whys).empty() && c.manifest.format >= 2 && !wanted.empty())
        if (std::string f = check_fingerprints(c, wanted); !f.empty()) return f;  // no copy to blame: the step is out
    }
    const std::string all = join_why(whys);
    if (all.empty()) {
      for (unsigned s : needed[rank]) report.local_copies += origin[{me_node, s}] == me_node ? 1 : 0;
      return {};
    }
    // The copies a failing rank read are out, on its node and where they came from.
    for (unsigned r = 0; r < world; ++r) {
      if (whys[r].empty()) continue;
      for (unsigned s : needed[r]) {
        const unsigned n = h.node_of[r];
        bad.insert({n, s});
        if (auto it = origin.find({n, s}); it != origin.end()) bad.insert({it->second, s});
        if (rebuilt.count(s)) no_rebuild.insert(s);
      }
    }
    last_why = all;
  }
  return last_why;
}

void Manager::Impl::after_restore(std::optional<std::uint64_t> memory_step) {
  staging.release_anonymous();
  if (!tier.dir) return;
  // The file to stage into next: this rank's copy where the restore read it, else (a restore from
  // the directory) a copy of it in the node's newest tier step, else a new one.
  tier.file_step.reset();
  std::vector<std::string> notes;
  std::vector<std::uint64_t> candidates;
  if (memory_step) candidates.push_back(*memory_step);
  try {
    for (const auto& s : tier.dir->inventory(notes)) candidates.push_back(s.step);
  } catch (const std::exception&) {
  }
  for (std::uint64_t s : candidates) {
    auto d = tier.dir->existing_step_dir(s);
    struct stat st {};
    std::string why;
    if (d && tier::open_own(*d, tier.file, st, why, false)) {
      tier.file_step = s;
      break;
    }
  }
  // The mapping serves the next capture, not this restore: it faults in every page of the file
  // (~0.1 s per GiB on the 2-core VM, docs/performance.md), so it runs in the background while
  // training resumes. The writer's slot holds it: every capture, registration, restore and the
  // destructor join it before they touch the staging or the tier.
  writer = std::thread([this] {
    try {
      map_tier_staging();
    } catch (const std::exception& e) {
      turn_tier_off(e.what());
    }
  });
}

}  // namespace trainrt::checkpoint
