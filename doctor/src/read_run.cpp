// Reading a run's output folder for trainrt-doctor: bounded, and every failure becomes a note.
#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "trainrt/doctor/doctor.hpp"
#include "trainrt/error.hpp"

namespace trainrt::doctor {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct Notes {
  RunData& run;
  const Limits& lim;
  void add(std::string s) {
    if (run.notes.size() < lim.max_notes) run.notes.push_back(std::move(s));
    else ++run.notes_dropped;
  }
  void info(std::string s) {
    if (run.info.size() < lim.max_notes) run.info.push_back(std::move(s));
  }
};

// Nesting deeper than `max` is refused before the parser sees it (a recursion bomb).
bool depth_ok(const std::string& s, unsigned max) {
  unsigned depth = 0;
  bool in_string = false, escaped = false;
  for (char c : s) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max) return false;
    } else if (c == ']' || c == '}') {
      if (depth) --depth;
    }
  }
  return true;
}

std::optional<json> parse_bounded(const std::string& s, unsigned max_depth) {
  if (!depth_ok(s, max_depth)) return std::nullopt;
  json j = json::parse(s, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

// Typed field readers: a field of the wrong type, out of range, or not finite reads as absent.
std::optional<std::uint64_t> get_u64(const json& o, const char* key) {
  auto it = o.find(key);
  if (it == o.end() || !it->is_number_unsigned()) return std::nullopt;
  return it->get<std::uint64_t>();
}
std::optional<double> get_f64(const json& o, const char* key) {
  auto it = o.find(key);
  if (it == o.end() || !it->is_number()) return std::nullopt;
  const double v = it->get<double>();
  if (!std::isfinite(v)) return std::nullopt;
  return v;
}
std::optional<std::string> get_str(const json& o, const char* key, std::size_t max) {
  auto it = o.find(key);
  if (it == o.end() || !it->is_string()) return std::nullopt;
  std::string s = it->get<std::string>();
  if (s.size() > max) s.resize(max);
  return s;
}

// "flight_rank12.json" -> 12 (prefix, decimal digits, suffix; no sign, no leading zero games).
std::optional<unsigned> rank_of(const std::string& name, const std::string& prefix, const std::string& suffix,
                                unsigned max_rank) {
  if (name.size() <= prefix.size() + suffix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return std::nullopt;
  const std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.empty() || digits.size() > 9 || (digits.size() > 1 && digits[0] == '0')) return std::nullopt;
  unsigned r = 0;
  auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), r);
  if (ec != std::errc() || p != digits.data() + digits.size() || r >= max_rank) return std::nullopt;
  return r;
}

double mtime_seconds(const fs::path& p) {
  // stat(), not fs::last_write_time: GCC 12 has no clock_cast to the system clock.
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) return -1;
  return static_cast<double>(st.st_mtim.tv_sec) + static_cast<double>(st.st_mtim.tv_nsec) * 1e-9;
}

void read_metrics(const fs::path& path, RankData& rd, Notes& notes) {
  const std::string name = path.filename().string();
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    notes.add(fmt::format("{}: cannot open", name));
    return;
  }
  rd.have_metrics = true;
  std::uintmax_t consumed = 0;
  std::size_t line_no = 0, bad = 0;
  std::string line;
  bool truncated_line = false;
  char c;
  // Lines read with a cap: a 1 GB line costs max_line_bytes of memory, not 1 GB.
  while (consumed < notes.lim.max_metrics_bytes) {
    line.clear();
    bool too_long = false, newline = false;
    while (in.get(c)) {
      ++consumed;
      if (c == '\n') {
        newline = true;
        break;
      }
      if (line.size() < notes.lim.max_line_bytes) line.push_back(c);
      else too_long = true;
      if (consumed >= notes.lim.max_metrics_bytes) break;
    }
    if (line.empty() && !newline && !too_long) break;  // end of file
    ++line_no;
    if (too_long) {
      notes.add(fmt::format("{}: line {} longer than {} bytes: skipped", name, line_no, notes.lim.max_line_bytes));
      continue;
    }
    auto j = parse_bounded(line, notes.lim.max_depth);
    if (!j || !j->is_object()) {
      if (!newline) truncated_line = true;  // the last line, cut: a rank killed mid-write
      else if (++bad <= 3) notes.add(fmt::format("{}: line {} is not a JSON object: skipped", name, line_no));
      continue;
    }
    const auto event = get_str(*j, "event", 32).value_or("");
    if (event == "start") {
      // A new attempt (a rerun appends): only the last attempt's lines describe the failure.
      ++rd.attempts;
      rd.world = get_u64(*j, "world");
      rd.start_wall = get_f64(*j, "wall");
      rd.last_step.reset();
      rd.last_wall.reset();
      rd.ended = false;
      rd.compute_s.clear();
      if (auto n = get_str(*j, "node", 256)) rd.node = *n;
      rd.local_rank.reset();
      if (auto l = get_u64(*j, "local_rank"); l && *l < notes.lim.max_rank) rd.local_rank = static_cast<unsigned>(*l);
      if (auto r = get_u64(*j, "rank"); r && *r != rd.rank)
        notes.add(fmt::format("{}: line {} says rank {}, the file name rank {}", name, line_no, *r, rd.rank));
    } else if (event == "step") {
      const auto step = get_u64(*j, "step");
      const auto step_s = get_f64(*j, "step_s");
      if (!step || !step_s || *step_s < 0) {
        if (++bad <= 3) notes.add(fmt::format("{}: line {}: a step without a valid step number or step_s", name, line_no));
        continue;
      }
      rd.last_step = *step;
      rd.last_wall = get_f64(*j, "wall");
      const double comm = get_f64(*j, "allreduce_s").value_or(0);
      const double compute = comm >= 0 && comm <= *step_s ? *step_s - comm : *step_s;
      if (rd.compute_s.size() >= notes.lim.max_steps) rd.compute_s.erase(rd.compute_s.begin());
      rd.compute_s.push_back(compute);
    } else if (event == "end") {
      rd.ended = true;
    }
  }
  if (consumed >= notes.lim.max_metrics_bytes)
    notes.add(fmt::format("{}: larger than {} bytes: read only that much", name, notes.lim.max_metrics_bytes));
  if (bad > 3) notes.add(fmt::format("{}: {} unreadable lines in all", name, bad));
  if (truncated_line) notes.add(fmt::format("{}: last line cut short (the rank was killed mid-write)", name));
  if (rd.attempts == 0) notes.add(fmt::format("{}: no start event", name));
}

void read_flight(const fs::path& path, RankData& rd, Notes& notes) {
  const std::string name = path.filename().string();
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec) {
    notes.add(fmt::format("{}: cannot stat: {}", name, ec.message()));
    return;
  }
  if (size > notes.lim.max_flight_bytes) {
    notes.add(fmt::format("{}: {} bytes, more than the {} a flight recorder may have: not read", name, size,
                          notes.lim.max_flight_bytes));
    return;
  }
  std::ifstream in(path, std::ios::binary);
  std::string text(static_cast<std::size_t>(size), '\0');
  if (!in || !in.read(text.data(), static_cast<std::streamsize>(size))) {
    notes.add(fmt::format("{}: cannot read", name));
    return;
  }
  text.resize(static_cast<std::size_t>(in.gcount()));
  auto j = parse_bounded(text, notes.lim.max_depth);
  if (!j || !j->is_object()) {
    notes.add(fmt::format("{}: not complete JSON (truncated or damaged): not used", name));
    return;
  }
  const auto rank = get_u64(*j, "rank");
  if (!rank || *rank != rd.rank) {
    notes.add(fmt::format("{}: names rank {}, the file name rank {}: not used", name,
                          rank ? std::to_string(*rank) : std::string("(none)"), rd.rank));
    return;
  }
  const auto it = j->find("ops");
  if (it == j->end() || !it->is_array()) {
    notes.add(fmt::format("{}: no ops array: not used", name));
    return;
  }
  rd.have_flight = true;
  rd.reason = get_str(*j, "reason", 4096).value_or("");
  rd.last_completed = get_u64(*j, "last_completed").value_or(0);
  rd.in_flight = get_u64(*j, "in_flight");
  if (auto n = get_str(*j, "node", 256)) rd.node = *n;
  const double mt = mtime_seconds(path);
  if (mt >= 0) rd.flight_mtime = mt;
  std::size_t bad = 0;
  const std::size_t first = it->size() > notes.lim.max_ops ? it->size() - notes.lim.max_ops : 0;
  for (std::size_t i = first; i < it->size(); ++i) {
    const json& o = (*it)[i];
    if (!o.is_object()) {
      ++bad;
      continue;
    }
    OpRecord op;
    const auto seq = get_u64(o, "seq");
    const auto bytes = get_u64(o, "bytes");
    const auto start = get_f64(o, "start_s");
    if (!seq || !bytes || !start) {
      ++bad;
      continue;
    }
    op.seq = *seq;
    op.bytes = *bytes;
    op.start_s = *start;
    op.op = get_str(o, "op", 128).value_or("?");
    op.end_s = get_f64(o, "end_s");
    rd.ops.push_back(std::move(op));
  }
  if (bad) notes.add(fmt::format("{}: {} op records without a valid seq, bytes or start_s: skipped", name, bad));
}

}  // namespace

RunData read_run(const fs::path& out_dir, const Limits& lim) {
  RunData run;
  Notes notes{run, lim};
  std::error_code ec;
  if (!fs::is_directory(out_dir, ec)) throw Error("not a directory", out_dir.string());
  fs::directory_iterator it(out_dir, ec), end;
  if (ec) throw Error(fmt::format("cannot list: {}", ec.message()), out_dir.string());
  std::map<unsigned, fs::path> metrics, flights;
  std::size_t seen = 0;
  for (; it != end; it.increment(ec)) {
    if (ec) {
      notes.add(fmt::format("listing {} stopped: {}", out_dir.string(), ec.message()));
      break;
    }
    if (++seen > lim.max_dir_entries) {
      notes.add(fmt::format("more than {} entries in {}: the rest not looked at", lim.max_dir_entries, out_dir.string()));
      break;
    }
    const std::string name = it->path().filename().string();
    const bool m = name.rfind("metrics_rank", 0) == 0, f = name.rfind("flight_rank", 0) == 0;
    if (!m && !f) continue;
    auto r = m ? rank_of(name, "metrics_rank", ".jsonl", lim.max_rank) : rank_of(name, "flight_rank", ".json", lim.max_rank);
    if (!r) {
      notes.add(fmt::format("{}: not a rank file name (or rank >= {}): ignored", name, lim.max_rank));
      continue;
    }
    if (!it->is_regular_file(ec)) {
      notes.add(fmt::format("{}: not a regular file: ignored", name));
      continue;
    }
    (m ? metrics : flights)[*r] = it->path();
  }
  std::map<unsigned, RankData> ranks;
  for (const auto& [r, p] : metrics) {
    auto& rd = ranks[r];
    rd.rank = r;
    read_metrics(p, rd, notes);
  }
  for (const auto& [r, p] : flights) {
    auto& rd = ranks[r];
    rd.rank = r;
    read_flight(p, rd, notes);
    // A flight file older than this rank's last start is left from an earlier attempt.
    if (rd.have_flight && rd.flight_mtime && rd.start_wall && *rd.flight_mtime + 1 < *rd.start_wall) {
      rd.flight_stale = true;
      notes.info(fmt::format("{}: written before the rank's last start (an earlier attempt): not used",
                            p.filename().string()));
    }
  }
  // A rerun on fewer nodes leaves the dropped ranks' files behind: a rank whose last start is
  // older than the newest start and names another world belongs to an earlier attempt.
  const RankData* newest = nullptr;
  for (const auto& [r, rd] : ranks)
    if (rd.start_wall && rd.world && (!newest || *rd.start_wall > *newest->start_wall)) newest = &rd;
  if (newest) {
    const double newest_start = *newest->start_wall;
    const std::uint64_t newest_world = *newest->world;
    std::size_t dropped = 0;
    for (auto it = ranks.begin(); it != ranks.end();) {
      const RankData& rd = it->second;
      if (rd.start_wall && rd.world && *rd.world != newest_world && *rd.start_wall < newest_start) {
        if (++dropped <= 16)
          notes.info(fmt::format("rank {}: files from an earlier attempt (world {}, the last attempt's is {}): not used",
                                rd.rank, *rd.world, newest_world));
        it = ranks.erase(it);
      } else {
        ++it;
      }
    }
    if (dropped > 16) notes.info(fmt::format("{} ranks' files in all are from an earlier attempt", dropped));
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
      notes.add(fmt::format("the ranks' start events name different world sizes: {}; using {}", all, best->first));
    }
  }
  for (auto& [r, rd] : ranks) {
    if (run.world && r >= *run.world)
      notes.add(fmt::format("rank {} has files but the world size is {}", r, *run.world));
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
    if (*run.world > lim.max_rank) notes.add(fmt::format("world size {} is above the {} ranks read", *run.world, lim.max_rank));
    if (missing)
      notes.add(fmt::format("{} rank(s) of {} left no file: {}{}", missing, *run.world, list, missing > 16 ? ",..." : ""));
  }
  return run;
}

}  // namespace trainrt::doctor
