// Reading a run's output folder for trainrt-doctor: the folder and every file opened once
// (run_files.hpp), the bytes read planned against one budget, and every failure said: a file that
// cannot be read is an error, a file whose content is damaged a note.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <charconv>
#include <map>

#include "reading.hpp"
#include "trainrt/error.hpp"
#include "trainrt/number.hpp"

namespace trainrt::doctor {

namespace fs = std::filesystem;

namespace {

// "flight_rank12.json" -> 12 (prefix, decimal digits, suffix; no sign, no leading zero games).
std::optional<unsigned> rank_of(const std::string& name, const std::string& prefix, const std::string& suffix,
                                unsigned max_rank) {
  if (name.size() <= prefix.size() + suffix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return std::nullopt;
  const std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.empty() || digits.size() > 9 || (digits.size() > 1 && digits[0] == '0')) return std::nullopt;
  if (max_rank == 0) return std::nullopt;
  return to_number<unsigned>(digits, 0, max_rank - 1);
}

struct Planned {
  unsigned rank;
  std::string name;
  std::uint64_t size = 0;       // from a look before reading; the read itself stays within `allowance`
  std::uint64_t allowance = 0;  // metrics: bytes to read; flights: nonzero when the budget had room
};

std::uint64_t size_of(const RunDir& dir, const std::string& name) {
  struct stat st {};
  if (::fstatat(dir.fd(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) return 0;
  return static_cast<std::uint64_t>(st.st_size);
}

// The budget: flight files whole, smallest first, then what is left shared among the metrics files,
// smallest first, each taking at most its size, its cap and an even share of what is left.
void plan(std::vector<Planned>& flights, std::vector<Planned>& metrics, const Limits& lim) {
  std::uint64_t left = lim.max_total_bytes;
  auto by_size = [](const Planned& a, const Planned& b) { return a.size < b.size; };
  std::sort(flights.begin(), flights.end(), by_size);
  for (auto& f : flights) {
    if (f.size > lim.max_flight_bytes) continue;  // said when it is opened
    f.allowance = f.size <= left ? std::max<std::uint64_t>(f.size, 1) : 0;
    if (f.allowance) left -= f.size;
  }
  std::sort(metrics.begin(), metrics.end(), by_size);
  for (std::size_t i = 0; i < metrics.size(); ++i) {
    const std::uint64_t share = left / (metrics.size() - i);
    metrics[i].allowance = std::min<std::uint64_t>({metrics[i].size, share, lim.max_metrics_bytes});
    left -= metrics[i].allowance;
  }
}

std::size_t per_rank(std::size_t total, std::size_t files, std::size_t max) {
  return std::clamp<std::size_t>(total / std::max<std::size_t>(files, 1), std::min<std::size_t>(16, max), max);
}

}  // namespace

RunData read_run(const fs::path& out_dir, const Limits& lim) {
  RunData run;
  Reading reading{run, lim};
  const RunDir dir = RunDir::open(out_dir);
  bool more = false;
  const std::vector<std::string> names = dir.names(lim.max_dir_entries, more);
  if (more) reading.note(fmt::format("more than {} entries in {}: the rest not looked at", lim.max_dir_entries, out_dir.string()));
  std::vector<Planned> metrics, flights;
  for (const auto& name : names) {
    const bool m = name.rfind("metrics_rank", 0) == 0, f = name.rfind("flight_rank", 0) == 0;
    if (!m && !f) continue;
    auto r = m ? rank_of(name, "metrics_rank", ".jsonl", lim.max_rank) : rank_of(name, "flight_rank", ".json", lim.max_rank);
    if (!r) {
      reading.note(fmt::format("{}: not a rank file name (or rank >= {}): ignored", name, lim.max_rank));
      continue;
    }
    (m ? metrics : flights).push_back({*r, name, size_of(dir, name)});
  }
  plan(flights, metrics, lim);
  reading.ops_cap = per_rank(lim.max_total_ops, flights.size(), lim.max_ops);
  reading.steps_cap = per_rank(lim.max_total_steps, metrics.size(), lim.max_steps);
  // In rank order, metrics before flights: a flight file's staleness is judged by its rank's start.
  auto by_rank = [](const Planned& a, const Planned& b) { return a.rank < b.rank; };
  std::sort(metrics.begin(), metrics.end(), by_rank);
  std::sort(flights.begin(), flights.end(), by_rank);
  std::map<unsigned, RankData> ranks;
  for (const auto& p : metrics) {
    auto& rd = ranks[p.rank];
    rd.rank = p.rank;
    read_metrics(dir, p.name, p.allowance, rd, reading);
  }
  for (const auto& p : flights) {
    auto& rd = ranks[p.rank];
    rd.rank = p.rank;
    read_flight(dir, p.name, p.allowance > 0, rd, reading);
    // A flight file from another process than this rank's last start is left from an earlier
    // attempt; where either does not say, one older than that start (the file's clock against the
    // node's: a shared filesystem's server may be behind, so the process is asked first).
    const bool other_process = rd.start_pid && rd.flight_pid && *rd.start_pid != *rd.flight_pid;
    const bool older = !(rd.start_pid && rd.flight_pid) && rd.flight_mtime && rd.start_wall && *rd.flight_mtime + 1 < *rd.start_wall;
    if (rd.have_flight && (other_process || older)) {
      rd.flight_stale = true;
      reading.info(fmt::format("{}: written before the rank's last start (an earlier attempt): not used", p.name));
    }
  }
  // A rerun on fewer nodes leaves the dropped ranks' files behind: a rank whose last start names
  // another world than the last attempt's belongs to an earlier attempt. Rank 0 is in every
  // attempt, so its last start names the last attempt's world, and a rank beyond that world is a
  // leftover whatever its node's clock says (one running ahead made its old start look newest);
  // without rank 0's start, the newest start names it.
  const RankData* newest = nullptr;
  if (auto zero = ranks.find(0); zero != ranks.end() && zero->second.start_wall && zero->second.world) newest = &zero->second;
  if (!newest)
    for (const auto& [r, rd] : ranks)
      if (rd.start_wall && rd.world && (!newest || *rd.start_wall > *newest->start_wall)) newest = &rd;
  if (newest) {
    const bool by_rank0 = newest->rank == 0;
    const double newest_start = *newest->start_wall;
    const std::uint64_t newest_world = *newest->world;
    std::size_t dropped = 0;
    for (auto it = ranks.begin(); it != ranks.end();) {
      const RankData& rd = it->second;
      // Beyond rank 0's world: a leftover whatever its node's clock says; inside it, an older start.
      const bool beyond = by_rank0 && rd.rank >= newest_world;
      if (rd.start_wall && rd.world && *rd.world != newest_world && (beyond || *rd.start_wall < newest_start)) {
        if (++dropped <= 16)
          reading.info(fmt::format("rank {}: files from an earlier attempt (world {}, the last attempt's is {}): not used",
                                rd.rank, *rd.world, newest_world));
        it = ranks.erase(it);
      } else {
        ++it;
      }
    }
    if (dropped > 16) reading.info(fmt::format("{} ranks' files in all are from an earlier attempt", dropped));
  }
  // The world size: the value most ranks' start events agree on; disagreement is a note.
  std::map<std::uint64_t, std::size_t> votes;
  for (const auto& [r, rd] : ranks)
    if (rd.world) ++votes[*rd.world];
  if (!votes.empty()) {
    auto best = std::max_element(votes.begin(), votes.end(), [](auto& a, auto& b) { return a.second < b.second; });
    run.world = best->first;
    if (votes.size() > 1) {
      std::string all;
      for (const auto& [w, n] : votes) all += fmt::format("{}{} ({} ranks)", all.empty() ? "" : ", ", w, n);
      reading.note(fmt::format("the ranks' start events name different world sizes: {}; using {}", all, best->first));
    }
  }
  map_node_local(ranks, reading.node_local);
  for (auto& [r, rd] : ranks) {
    if (run.world && r >= *run.world)
      reading.note(fmt::format("rank {} has files but the world size is {}", r, *run.world));
    run.ranks.push_back(std::move(rd));
  }
  if (run.world) {
    // Missing ranks: counted against the world size, listed up to 16 (never one allocation per
    // rank of an attacker's world size).
    std::size_t missing = 0;
    std::string list;
    const std::uint64_t w = std::min<std::uint64_t>(*run.world, lim.max_rank);
    for (std::uint64_t r = 0; r < w; ++r) {
      if (ranks.count(static_cast<unsigned>(r))) continue;  // keys stay after the values moved out
      if (++missing <= 16) list += fmt::format("{}{}", list.empty() ? "" : ",", r);
    }
    if (*run.world > lim.max_rank) reading.note(fmt::format("world size {} is above the {} ranks read", *run.world, lim.max_rank));
    if (missing)
      reading.note(fmt::format("{} rank(s) of {} left no file: {}{}", missing, *run.world, list, missing > 16 ? ",..." : ""));
  }
  return run;
}

}  // namespace trainrt::doctor
