// From what the ranks left behind to one verdict: a mismatched collective, a hang (who never
// arrived, who waited), a failure without a collective, stragglers, or healthy.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "trainrt/doctor/doctor.hpp"

namespace trainrt::doctor {

namespace {

const std::string kUnknown = "unknown node";

// A waiter's failure names the ranks that never arrived: those it timed out waiting for, those
// that died, or (an abort) the rank that failed first, which may itself have been a waiter. A
// transport failure or a mismatch names no culprit.
bool names_culprits(const CollectiveFailure& f) {
  return f.kind == FailureKind::Timeout || f.kind == FailureKind::DeadPeer || f.kind == FailureKind::Aborted;
}

// How long a rank waited: its failure says, else the flight file's time minus its last step's.
double waited_seconds(const RankData& rd) {
  if (rd.failure && rd.failure->waited_s >= 0) return rd.failure->waited_s;
  // An estimate only where both clocks look like one run's (within a day of each other).
  if (rd.flight_mtime && rd.last_wall && *rd.flight_mtime >= *rd.last_wall && *rd.flight_mtime - *rd.last_wall < 86400)
    return *rd.flight_mtime - *rd.last_wall;
  return -1;
}

std::string node_or_unknown(const std::string& n) { return n.empty() ? kUnknown : n; }

bool usable_flight(const RankData& rd) { return rd.have_flight && !rd.flight_stale; }

// The first sequence number that two ranks recorded as different collectives.
bool find_mismatch(const RunData& run, Verdict& v) {
  struct First {
    std::string op;
    std::uint64_t bytes;
    unsigned rank;
  };
  std::map<std::uint64_t, First> first;
  std::optional<std::uint64_t> bad_seq;
  for (const auto& rd : run.ranks) {
    if (!usable_flight(rd)) continue;
    for (const auto& op : rd.ops) {
      auto [it, inserted] = first.try_emplace(op.seq, First{op.op, op.bytes, rd.rank});
      if (!inserted && (it->second.op != op.op || it->second.bytes != op.bytes) && (!bad_seq || op.seq < *bad_seq))
        bad_seq = op.seq;
    }
  }
  if (!bad_seq) return false;
  std::map<std::pair<std::string, std::uint64_t>, std::vector<unsigned>> variants;
  for (const auto& rd : run.ranks) {
    if (!usable_flight(rd)) continue;
    for (const auto& op : rd.ops)
      if (op.seq == *bad_seq) {
        auto& ranks = variants[{op.op, op.bytes}];
        ranks.push_back(rd.rank);
        if (!v.collective) v.collective = op;
      }
  }
  for (const auto& [key, ranks] : variants) {
    std::string list;
    for (std::size_t i = 0; i < ranks.size() && i < 16; ++i) list += fmt::format("{}{}", i ? "," : "", ranks[i]);
    if (ranks.size() > 16) list += fmt::format(",... ({} ranks)", ranks.size());
    v.mismatches.push_back(fmt::format("rank(s) {}: {} {} B", list, key.first, key.second));
  }
  v.kind = Kind::Mismatch;
  v.summary = fmt::format("mismatched collectives at #{}: the ranks called different operations ({} variants): a "
                          "program bug, not a node fault",
                          *bad_seq, variants.size());
  return true;
}

// A backend that compared the ranks' calls and found them different says so in its failure: a
// mismatch even where the recorded ops agree (a trainer may record one op for several calls).
bool find_reported_mismatch(const RunData& run, Verdict& v) {
  std::size_t reports = 0;
  for (const auto& rd : run.ranks) {
    if (!usable_flight(rd) || !rd.failure || rd.failure->kind != FailureKind::Mismatch) continue;
    if (++reports > 16) continue;
    v.mismatches.push_back(fmt::format("rank {}: its call differs from rank(s) {}", rd.rank,
                                       fmt::join(rd.failure->ranks, ",")));
    for (const auto& op : rd.ops)
      if (rd.in_flight && op.seq == *rd.in_flight && !v.collective) v.collective = op;
  }
  if (reports == 0) return false;
  if (reports > 16) v.mismatches.push_back(fmt::format("... {} ranks reported it in all", reports));
  v.kind = Kind::Mismatch;
  v.summary = fmt::format("mismatched collectives{}: the ranks called different operations ({} rank(s) found it): a "
                          "program bug, not a node fault",
                          v.collective ? fmt::format(" at #{}", v.collective->seq) : std::string(), reports);
  return true;
}

std::string rank_list(const std::vector<RankNode>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size() && i < 8; ++i)
    s += fmt::format("{}rank {} on {}", i ? ", " : "", v[i].rank, node_or_unknown(v[i].node));
  if (v.size() > 8) s += fmt::format(", ... {} in all", v.size());
  return s;
}

void find_hang(const RunData& run, const Options& opt, Verdict& v) {
  std::map<unsigned, const RankData*> by_rank;
  for (const auto& rd : run.ranks) by_rank[rd.rank] = &rd;
  const auto node_of = [&](unsigned r) {
    auto it = by_rank.find(r);
    return it == by_rank.end() ? std::string() : it->second->node;
  };
  // The collective the ranks diverged at: the newest any rank was waiting in, else the one after
  // the newest completed.
  std::uint64_t seq = 0;
  bool any_in_flight = false;
  for (const auto& rd : run.ranks) {
    if (!usable_flight(rd)) continue;
    if (rd.in_flight) {
      seq = any_in_flight ? std::max(seq, *rd.in_flight) : *rd.in_flight;
      any_in_flight = true;
    } else if (!any_in_flight) {
      seq = std::max(seq, rd.last_completed + 1);
    }
  }
  // Ranks that completed the collective others are still inside went on to the next: those others
  // handed in their part and stalled there (a node-local phase lets the rest finish without them).
  // The ranks diverged at the next collective, which the ones behind never reached.
  if (any_in_flight && std::any_of(run.ranks.begin(), run.ranks.end(), [&](const RankData& rd) {
        return usable_flight(rd) && !rd.in_flight && rd.last_completed >= seq;
      })) {
    ++seq;
    any_in_flight = std::any_of(run.ranks.begin(), run.ranks.end(),
                                [&](const RankData& rd) { return usable_flight(rd) && rd.in_flight && *rd.in_flight == seq; });
  }
  // A rank whose dump says it was inside a collective the recorder does not number (a trainer's
  // stop agreement between two gradient allreduces), right after the last one it completed, was
  // waiting for a peer there: it arrived, whatever its failure says (a watchdog's timeout names
  // nobody). Dumps without that field: with nobody in a numbered collective, a rank whose dump
  // says a collective failed under it (a peer's connection reset, a peer dead, an abort naming
  // ranks) was alive in such a collective. A timeout or abort naming nobody is left out there:
  // that is also what a rank's own watchdog writes when it stalled outside any collective. The
  // ranks SIGKILLed or stalled elsewhere are the ones to find.
  const auto failed_in_unnumbered = [&](const RankData& rd) {
    if (rd.in_flight || rd.last_completed + 1 != seq) return false;
    if (rd.unnumbered) return true;
    if (any_in_flight || !rd.failure) return false;
    const FailureKind k = rd.failure->kind;
    return k == FailureKind::Transport || k == FailureKind::DeadPeer ||
           ((k == FailureKind::Timeout || k == FailureKind::Aborted) && !rd.failure->ranks.empty());
  };
  const auto waiting_here = [&](const RankData& rd) {
    return usable_flight(rd) && ((rd.in_flight && *rd.in_flight == seq) || failed_in_unnumbered(rd));
  };
  // The ranks whose own recorder has them waiting in this collective: they arrived. A peer's
  // failure may still name one: an abort because rank 0 failed when rank 0 gave up waiting for
  // another node, or a timeout on a node whose leader was itself waiting across nodes.
  std::set<unsigned> arrived;
  bool unnumbered = false;
  std::string unnumbered_op;  // its name, where a dump gives one
  for (const auto& rd : run.ranks)
    if (waiting_here(rd)) {
      arrived.insert(rd.rank);
      unnumbered = unnumbered || (!any_in_flight && !rd.in_flight);
      if (!any_in_flight && rd.unnumbered && unnumbered_op.empty()) unnumbered_op = *rd.unnumbered;
    }
  std::set<unsigned> never;
  // Named though in flight here: used only if nobody else is, timeouts before aborts.
  std::vector<std::pair<bool, RankNode>> named_arrived;  // (from an abort, who)
  bool any_timeout = false;
  for (const auto& rd : run.ranks) {
    if (!usable_flight(rd)) continue;
    if (arrived.count(rd.rank)) {
      v.waited.push_back({rd.rank, rd.node, rd.reason, waited_seconds(rd)});
      any_timeout = any_timeout || (rd.failure && rd.failure->kind == FailureKind::Timeout);
      const bool abort = rd.failure && rd.failure->kind == FailureKind::Aborted;
      if (rd.failure && names_culprits(*rd.failure))
        for (unsigned r : rd.failure->ranks) {
          if (r == rd.rank || (run.world && r >= *run.world) || never.count(r)) continue;
          RankNode who{r, node_of(r), fmt::format("named by rank {}: {}", rd.rank, rd.reason)};
          if (arrived.count(r)) named_arrived.emplace_back(abort, std::move(who));
          else if (never.insert(r).second) v.never_arrived.push_back(std::move(who));
        }
      for (const auto& op : rd.ops)
        if (op.seq == seq && !v.collective) v.collective = op;
    } else if (rd.last_completed < seq && never.insert(rd.rank).second) {
      v.never_arrived.push_back(
          {rd.rank, rd.node,
           fmt::format("its flight recorder stops after #{}{}", rd.last_completed,
                       rd.reason.empty() ? std::string() : "; it says: " + rd.reason)});
    }
  }
  // A rank that arrived but was named is the culprit only when nobody else is: it came late, after
  // the others had given up. Then a timeout's name counts, an abort's ("because rank 0 failed",
  // from the late rank itself) only when there is no other.
  if (v.never_arrived.empty())
    for (auto& [abort, who] : named_arrived)
      if (!abort && never.insert(who.rank).second) v.never_arrived.push_back(std::move(who));
  // Ranks whose metrics stop two or more steps before the others' never reached the collectives
  // in between (one step apart is a normal kill between the allreduce and the metrics line).
  std::uint64_t newest = 0;
  for (const auto& rd : run.ranks)
    if (rd.last_step) newest = std::max(newest, *rd.last_step);
  for (const auto& rd : run.ranks) {
    if (rd.ended || usable_flight(rd) || never.count(rd.rank)) continue;
    const std::uint64_t last = rd.last_step.value_or(0);
    if (rd.have_metrics && rd.attempts && last + 2 <= newest && never.insert(rd.rank).second)
      v.never_arrived.push_back({rd.rank, rd.node, fmt::format("its metrics stop at step {}, others reached {}", last, newest)});
  }
  // Others waited and nobody was named: the ranks with no flight recorder are the suspects.
  if (v.never_arrived.empty() && !v.waited.empty()) {
    std::set<unsigned> waiting;
    for (const auto& w : v.waited) waiting.insert(w.rank);
    const std::uint64_t world = run.world.value_or(run.ranks.empty() ? 0 : run.ranks.back().rank + 1ull);
    // A rank whose metrics end with an "end" event finished its run: not a suspect.
    const auto ended = [&](unsigned r) {
      auto it = by_rank.find(r);
      return it != by_rank.end() && it->second->ended;
    };
    std::vector<unsigned> left;  // ended while the others waited: worth saying, not presuming
    // A rank with a flight recorder of its own is judged by it above, never presumed.
    const auto has_flight = [&](unsigned r) {
      auto it = by_rank.find(r);
      return it != by_rank.end() && usable_flight(*it->second);
    };
    for (std::uint64_t r = 0; r < std::min<std::uint64_t>(world, opt.limits.max_rank); ++r) {
      const auto rank = static_cast<unsigned>(r);
      if (waiting.count(rank) || has_flight(rank)) continue;
      if (ended(rank)) {
        if (left.size() < 16) left.push_back(rank);
      } else if (v.never_arrived.size() < 4096) {
        v.never_arrived.push_back({rank, node_of(rank), "presumed: no flight recorder while the others waited"});
      }
    }
    if (!left.empty())
      v.notes.push_back(fmt::format("rank(s) {} ended their run (an \"end\" event) while the others waited: not presumed "
                                    "culprits; a rank that leaves the training loop early is a program bug",
                                    fmt::join(left, ",")));
  }
  // An abort's name of a rank that arrived counts last: below ranks that left no flight recorder
  // while the others waited (a node's processes killed: the rank named lost its peer there).
  // When those names cover every node (each node's ranks aborted because their own leader failed
  // across nodes: a link down leaves both sides so), they single out nothing; excluding every node
  // would leave no rerun. Then nobody is named, and a note says why.
  if (v.never_arrived.empty()) {
    std::set<std::string> all_nodes, named_nodes;
    for (const auto& rd : run.ranks)
      if (!rd.node.empty()) all_nodes.insert(rd.node);
    std::vector<RankNode> named;
    for (auto& [abort, who] : named_arrived)
      if (abort && never.insert(who.rank).second) {
        named_nodes.insert(who.node);
        named.push_back(std::move(who));
      }
    if (all_nodes.size() > 1 && named_nodes == all_nodes)
      v.notes.push_back(fmt::format("every rank arrived, and the aborts name a rank on every one of the {} nodes ({}): no "
                                    "node is singled out",
                                    all_nodes.size(), rank_list(named)));
    else
      v.never_arrived = std::move(named);
  }
  if (v.waited.empty() && v.never_arrived.empty()) return;
  // A peer that died is a failure, not a hang: the waits ended at once instead of timing out.
  const bool timed_out = v.waited.empty() || any_timeout;
  v.kind = timed_out ? Kind::Hang : Kind::Failure;
  std::string where = v.collective ? fmt::format("collective #{} {} ({} B)", seq, v.collective->op, v.collective->bytes)
                     : unnumbered  ? fmt::format("{} after #{} (the flight recorder does not number it)",
                                                 unnumbered_op.empty() ? std::string("a collective") : unnumbered_op, seq - 1)
                     : seq > 0     ? fmt::format("collective #{}", seq)
                                   : fmt::format("step {} (no flight recorder)", newest + 1);
  // No made-up "#seq ?" beside a summary that says the collective had no number.
  if (!v.collective && seq > 0 && !unnumbered) v.collective = OpRecord{seq, "?", 0, 0, std::nullopt};
  v.summary = fmt::format("{} at {}: never arrived: {}; waited: {}", timed_out ? "hang" : "peer failure", where,
                          v.never_arrived.empty() ? std::string("none found") : rank_list(v.never_arrived),
                          v.waited.empty() ? std::string("none recorded") : rank_list(v.waited));
}

void find_stragglers(const RunData& run, const Options& opt, Verdict& v) {
  if (run.ranks.empty()) return;
  const unsigned top = run.ranks.back().rank;  // bounded by max_rank when read
  std::vector<double> per_rank(top + 1ull, std::nan(""));
  std::vector<std::string> nodes(top + 1ull);
  for (const auto& rd : run.ranks) {
    nodes[rd.rank] = rd.node;
    if (!rd.compute_s.empty()) per_rank[rd.rank] = median_of(rd.compute_s);
  }
  v.median_compute_s = median_of(per_rank);
  v.stragglers = detect_stragglers(per_rank, nodes, opt.straggler_threshold, opt.straggler_min_excess_s);
  if (v.stragglers.empty()) return;
  v.kind = Kind::Stragglers;
  std::string list;
  for (std::size_t i = 0; i < v.stragglers.size() && i < 8; ++i)
    list += fmt::format("{}rank {} on {} (+{:.0f}%)", i ? ", " : "", v.stragglers[i].rank, node_or_unknown(v.stragglers[i].node),
                        v.stragglers[i].excess * 100);
  if (v.stragglers.size() > 8) list += fmt::format(", ... {} in all", v.stragglers.size());
  v.summary = fmt::format("no hang; straggler(s), compute time per step above the median {:.3f} ms by more than {:.0f}%: {}",
                          v.median_compute_s * 1e3, opt.straggler_threshold * 100, list);
}

}  // namespace

const char* to_string(Kind k) {
  switch (k) {
    case Kind::Healthy: return "healthy";
    case Kind::Hang: return "hang";
    case Kind::Mismatch: return "mismatch";
    case Kind::Failure: return "failure";
    case Kind::Stragglers: return "stragglers";
    case Kind::BadInput: return "bad-input";
  }
  return "?";
}

int exit_code(const Verdict& v) {
  switch (v.kind) {
    case Kind::Healthy: return 0;
    case Kind::BadInput: return 2;
    default: return 1;
  }
}

Verdict diagnose(const RunData& run, const Options& opt) {
  Verdict v;
  v.world = run.world;
  v.ranks_read = run.ranks.size();
  // A file that exists but was not read may hold the rank everything waited for: no verdict (and no
  // node to exclude) rests on it being absent.
  if (!run.errors.empty()) {
    v.kind = Kind::BadInput;
    v.summary = fmt::format("cannot tell: {} file(s) of the run could not be read ({}{})", run.errors.size(),
                            run.errors.front(), run.errors.size() > 1 ? ", ..." : "");
    v.notes = run.errors;
    v.notes.insert(v.notes.end(), run.notes.begin(), run.notes.end());
    if (run.notes_dropped) v.notes.push_back(fmt::format("... and {} more notes", run.notes_dropped));
    return v;
  }
  v.notes = run.notes;
  v.notes.insert(v.notes.end(), run.info.begin(), run.info.end());
  if (run.notes_dropped) v.notes.push_back(fmt::format("... and {} more notes", run.notes_dropped));
  const bool readable = std::any_of(run.ranks.begin(), run.ranks.end(),
                                    [](const RankData& rd) { return rd.attempts > 0 || usable_flight(rd); });
  if (!readable) {
    v.kind = Kind::BadInput;
    v.summary = "no rank's metrics or flight recorder could be read";
    return v;
  }
  std::size_t unnamed = 0;
  for (const auto& rd : run.ranks) unnamed += rd.node.empty();
  if (unnamed)
    v.notes.push_back(fmt::format("{} rank(s) name no node in their files (the trainer's start event carries \"node\")", unnamed));

  if (!find_mismatch(run, v) && !find_reported_mismatch(run, v)) find_hang(run, opt, v);
  if (v.kind == Kind::Healthy) {
    const bool any_flight = std::any_of(run.ranks.begin(), run.ranks.end(), usable_flight);
    if (any_flight) {
      v.kind = Kind::Failure;
      v.summary = "flight recorders were dumped but name no hung collective; see the ranks' reasons";
      for (const auto& rd : run.ranks)
        if (usable_flight(rd)) v.waited.push_back({rd.rank, rd.node, rd.reason, -1});
    } else {
      find_stragglers(run, opt, v);
    }
  }
  for (const auto& n : v.never_arrived)
    if (!n.node.empty()) v.culprit_nodes.push_back(n.node);
  std::sort(v.culprit_nodes.begin(), v.culprit_nodes.end());
  v.culprit_nodes.erase(std::unique(v.culprit_nodes.begin(), v.culprit_nodes.end()), v.culprit_nodes.end());
  if (v.kind == Kind::Healthy) {
    std::size_t running = 0;
    for (const auto& rd : run.ranks) running += rd.attempts && !rd.ended;
    v.summary = running ? fmt::format("no hang, mismatch or straggler found; {} rank(s) have not ended (still running, "
                                      "stopped for a requeue, or killed without a flight recorder)",
                                      running)
                        : "healthy: every rank ended, no straggler";
    // A clean bill needs complete input: with unreadable parts the answer is "could not tell".
    if (!run.notes.empty()) {
      v.kind = Kind::BadInput;
      v.summary = fmt::format("no problem found in what could be read, but {} input problem(s) (notes)", v.notes.size());
    }
  }
  return v;
}

}  // namespace trainrt::doctor
