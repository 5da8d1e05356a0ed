// One rank's metrics and flight recorder, read through run_files.hpp (one descriptor each, bounded
// bytes) and json_fields.hpp (no document is built): memory per file is one line or one token plus
// what is kept, time is linear in the bytes read.
#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <nlohmann/json.hpp>

#include "json_fields.hpp"
#include "reading.hpp"

namespace trainrt::doctor {
namespace {

// Strings kept from a file: a reason is one error message, a node a host name.
constexpr std::size_t kMaxString = 1024;

enum MetricKey : std::size_t { kEvent, kWorld, kWall, kNode, kLocalRank, kRank, kStep, kStepS, kAllreduceS, kPid };
enum FlightKey : std::size_t { kFRank, kReason, kLastCompleted, kInFlight, kFNode, kFailure, kWaitedS, kUnnumbered, kFPid };
enum OpKey : std::size_t { kSeq, kOp, kBytes, kStartS, kEndS };

std::string cut(std::optional<std::string> s, std::size_t max) {
  if (!s) return {};
  return s->size() > max ? std::string(utf8_prefix(*s, max)) : std::move(*s);
}

// A file that exists and cannot be read is an error (the run cannot be judged without it); one that
// is not a regular file is what someone put there: a note, as for any other damaged content.
bool opened(const RankFile& f, Reading& r) {
  if (f.fd) return true;
  if (f.err == ENOENT) r.note(f.why + " (removed since the listing)");
  else if (f.err) r.error(f.why);
  else r.note(f.why);
  return false;
}

struct MetricsState {
  MetricsState(RankData& rd_, Reading& r_, const std::string& name_) : rd(rd_), r(r_), name(name_) {}
  RankData& rd;
  Reading& r;
  const std::string& name;
  FieldReader f{{"event", "world", "wall", "node", "local_rank", "rank", "step", "step_s", "allreduce_s", "pid"}, "", {},
                r.lim.max_depth, kMaxString};
  std::deque<double> compute;
  std::size_t line_no = 0, bad = 0;
  bool truncated_line = false;

  void line(std::string_view text, bool newline, bool too_long) {
    ++line_no;
    if (too_long) {
      r.note(fmt::format("{}: line {} longer than {} bytes: skipped", name, line_no, r.lim.max_line_bytes));
      return;
    }
    f.reset();
    const bool ok = nlohmann::json::sax_parse(text.data(), text.data() + text.size(), &f);
    if (!ok || !f.top_is_object) {
      if (!newline) truncated_line = true;  // the last line, cut: a rank killed mid-write
      else if (++bad <= 3) r.note(fmt::format("{}: line {} is not a JSON object: skipped", name, line_no));
      return;
    }
    const Fields& j = f.top;
    const std::string event = cut(j.str(kEvent), 32);
    if (event == "start") {
      // A new attempt (a rerun appends): only the last attempt's lines describe the failure.
      ++rd.attempts;
      rd.world = j.u64(kWorld);
      rd.start_wall = j.f64(kWall);
      rd.start_pid = j.u64(kPid);
      rd.last_step.reset();
      rd.last_wall.reset();
      rd.ended = false;
      compute.clear();
      if (auto n = j.str(kNode)) rd.node = cut(std::move(n), 256);
      rd.local_rank.reset();
      if (auto l = j.u64(kLocalRank); l && *l < r.lim.max_rank) rd.local_rank = static_cast<unsigned>(*l);
      if (auto k = j.u64(kRank); k && *k != rd.rank)
        r.note(fmt::format("{}: line {} says rank {}, the file name rank {}", name, line_no, *k, rd.rank));
    } else if (event == "step") {
      const auto step = j.u64(kStep);
      const auto step_s = j.f64(kStepS);
      if (!step || !step_s || *step_s < 0) {
        if (++bad <= 3) r.note(fmt::format("{}: line {}: a step without a valid step number or step_s", name, line_no));
        return;
      }
      rd.last_step = *step;
      rd.last_wall = j.f64(kWall);
      const double comm = j.f64(kAllreduceS).value_or(0);
      if (compute.size() >= r.steps_cap) compute.pop_front();
      compute.push_back(comm >= 0 && comm <= *step_s ? *step_s - comm : *step_s);
    } else if (event == "end") {
      rd.ended = true;
    }
  }
};

// What ended the rank's collective, from the dump's fields; from its reason (legacy_reason.cpp)
// only in a dump written before the fields existed, which lacks the "failure" key altogether.
void read_failure(const FieldReader& j, const std::string& name, RankData& rd, Reading& r) {
  if (!j.top.present(kFailure)) {
    LegacyFailure legacy = legacy_failure(rd.reason, r.lim.max_rank);
    rd.failure = std::move(legacy.failure);
    if (legacy.node_local) r.node_local.insert(rd.rank);
    return;
  }
  const std::optional<std::string> kind_name = j.top.str(kFailure);
  if (!kind_name) return;  // null: the dump is not about a failed collective
  const std::optional<FailureKind> kind = parse_failure_kind(*kind_name);
  if (!kind) {
    r.note(fmt::format("{}: failure '{}' is not one this doctor knows: not used", name, cut(kind_name, 64)));
    return;
  }
  CollectiveFailure f{*kind, {}, j.top.f64(kWaitedS).value_or(-1)};
  if (f.waited_s < 0) f.waited_s = -1;
  if (j.numbers_seen && !j.numbers_ok) r.note(fmt::format("{}: failure_ranks is not a list of ranks: not used", name));
  if (j.numbers_ok)
    for (std::uint64_t rank : j.numbers)
      if (rank < r.lim.max_rank) f.ranks.push_back(static_cast<unsigned>(rank));
  if (j.numbers_cut) r.note(fmt::format("{}: failure_ranks: only the first {} used", name, j.max_numbers));
  rd.failure = std::move(f);
}

OpRecord to_op(const Fields& o, bool& ok) {
  OpRecord op;
  const auto seq = o.u64(kSeq);
  const auto bytes = o.u64(kBytes);
  const auto start = o.f64(kStartS);
  ok = seq && bytes && start;
  if (!ok) return op;
  op.seq = *seq;
  op.bytes = *bytes;
  op.start_s = *start;
  op.op = o.str(kOp) ? cut(o.str(kOp), 128) : "?";
  op.end_s = o.f64(kEndS);
  return op;
}

}  // namespace

void read_metrics(const RunDir& dir, const std::string& name, std::uint64_t allowance, RankData& rd, Reading& r) {
  RankFile f = open_rank_file(dir, name);
  if (!opened(f, r)) return;
  rd.have_metrics = true;
  const auto size = static_cast<std::uint64_t>(f.st.st_size);
  const std::uint64_t cap = std::min<std::uint64_t>(allowance, r.lim.max_metrics_bytes);
  // The newest lines are the ones that describe the failure: a longer file is read from its end,
  // starting one byte early so that a line starting exactly there is recognised as whole.
  const std::uint64_t start = size > cap ? size - cap : 0;
  ByteSource src(f.fd.get(), start > 0 ? start - 1 : 0, start > 0 ? cap + 1 : cap);
  if (start > 0) {
    r.note(fmt::format("{}: {} bytes: only the last {} read{}", name, size, cap,
                       cap < r.lim.max_metrics_bytes ? " (the run's read budget shared among its files)" : ""));
    for (int c = src.next(); c >= 0 && c != '\n'; c = src.next()) {
    }
  }
  MetricsState m{rd, r, name};
  // A line is scanned a buffer at a time (memchr) and copied only when it straddles two buffers;
  // past max_line_bytes it is skipped to its end without being kept.
  std::string line;
  bool too_long = false;
  for (std::string_view buf = src.buffered(); !buf.empty(); buf = src.buffered()) {
    const void* nl = std::memchr(buf.data(), '\n', buf.size());
    const std::size_t n = nl ? static_cast<std::size_t>(static_cast<const char*>(nl) - buf.data()) : buf.size();
    const std::string_view part = buf.substr(0, n);
    src.take(nl ? n + 1 : n);
    if (!too_long && line.size() + part.size() > r.lim.max_line_bytes) too_long = true, line.clear();
    if (!nl) {
      if (!too_long) line.append(part);
      continue;
    }
    if (too_long) m.line({}, true, true);
    else if (line.empty()) m.line(part, true, false);  // the whole line in the buffer: no copy
    else m.line(line.append(part), true, false);
    line.clear();
    too_long = false;
  }
  if (!line.empty() || too_long) m.line(line, false, too_long);
  if (src.error()) r.error(fmt::format("{}: cannot read: {}", name, std::strerror(src.error())));
  rd.compute_s.assign(m.compute.begin(), m.compute.end());
  if (m.bad > 3) r.note(fmt::format("{}: {} unreadable lines in all", name, m.bad));
  if (m.truncated_line) r.note(fmt::format("{}: last line cut short (the rank was killed mid-write)", name));
  if (rd.attempts == 0) r.note(fmt::format("{}: no start event", name));
}

void read_flight(const RunDir& dir, const std::string& name, bool fits, RankData& rd, Reading& r) {
  RankFile f = open_rank_file(dir, name);
  if (!opened(f, r)) return;
  const auto size = static_cast<std::uint64_t>(f.st.st_size);
  if (size > r.lim.max_flight_bytes) {
    r.note(fmt::format("{}: {} bytes, more than the {} a flight recorder may have: not read", name, size,
                       r.lim.max_flight_bytes));
    return;
  }
  if (!fits) {
    r.error(fmt::format("{}: not read: the run's files are larger than the {} bytes read in all", name,
                        r.lim.max_total_bytes));
    return;
  }
  // One byte more than the cap: a file that grew past it while being read is caught, not cut.
  ByteSource src(f.fd.get(), 0, r.lim.max_flight_bytes + 1);
  FieldReader j({"rank", "reason", "last_completed", "in_flight", "node", "failure", "waited_s", "unnumbered", "pid"}, "ops",
                {"seq", "op", "bytes", "start_s", "end_s"}, r.lim.max_depth, kMaxString);
  j.numbers_key = "failure_ranks";
  std::deque<std::optional<OpRecord>> ops;  // the newest ops_cap elements; nullopt: not a valid op
  j.on_list = [&] { ops.clear(); };
  j.on_item = [&](const std::optional<Fields>& o) {
    if (ops.size() >= r.ops_cap) ops.pop_front();
    bool ok = false;
    OpRecord op = o ? to_op(*o, ok) : OpRecord{};
    ops.push_back(ok ? std::optional<OpRecord>(std::move(op)) : std::nullopt);
  };
  const bool parsed = nlohmann::json::sax_parse(SourceIterator(src), SourceIterator(), &j);
  if (src.error()) {
    r.error(fmt::format("{}: cannot read: {}", name, std::strerror(src.error())));
    return;
  }
  if (src.consumed() > r.lim.max_flight_bytes) {
    r.note(fmt::format("{}: grew past {} bytes while it was read: not used", name, r.lim.max_flight_bytes));
    return;
  }
  if (!parsed || !j.top_is_object) {
    r.note(fmt::format("{}: not complete JSON (truncated or damaged): not used", name));
    return;
  }
  const auto rank = j.top.u64(kFRank);
  if (!rank || *rank != rd.rank) {
    r.note(fmt::format("{}: names rank {}, the file name rank {}: not used", name,
                       rank ? std::to_string(*rank) : std::string("(none)"), rd.rank));
    return;
  }
  if (!j.list_is_array) {
    r.note(fmt::format("{}: no ops array: not used", name));
    return;
  }
  rd.have_flight = true;
  rd.reason = cut(j.top.str(kReason), kMaxString);
  rd.last_completed = j.top.u64(kLastCompleted).value_or(0);
  rd.in_flight = j.top.u64(kInFlight);
  if (auto u = j.top.str(kUnnumbered); u && !u->empty()) rd.unnumbered = cut(std::move(u), 256);
  if (auto n = j.top.str(kFNode)) rd.node = cut(std::move(n), 256);
  rd.flight_pid = j.top.u64(kFPid);
  read_failure(j, name, rd, r);
  rd.flight_mtime = static_cast<double>(f.st.st_mtim.tv_sec) + static_cast<double>(f.st.st_mtim.tv_nsec) * 1e-9;
  std::size_t bad = 0;
  for (auto& op : ops) {
    if (op) rd.ops.push_back(std::move(*op));
    else ++bad;
  }
  if (bad) r.note(fmt::format("{}: {} op records without a valid seq, bytes or start_s: skipped", name, bad));
}

}  // namespace trainrt::doctor
