// The doctor decides on the failure fields the flight recorder writes (FlightRecorder::dump with an
// error's CollectiveFailure), never on the reason's words: rewording every message, or writing one
// that names other ranks in the old backends' phrases, leaves the verdict as it was.
#include <catch2/catch.hpp>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "fixture.hpp"
#include "trainrt/doctor/doctor.hpp"
#include "trainrt/error.hpp"
#include "trainrt/runtime/observability.hpp"

using namespace trainrt;
using namespace trainrt::testing;
using namespace trainrt::doctor;

namespace {

struct Dump {
  unsigned rank;
  std::uint64_t completed;  // collectives done; the next one is in flight when `in_flight`
  bool in_flight;
  std::optional<CollectiveFailure> failure;
};

// Writes each rank's metrics (two nodes) and its flight file through the runtime's own recorder,
// each reason made by `say` from the rank.
void write_run(const RunDir& d, unsigned world, const std::vector<Dump>& dumps,
               const std::function<std::string(unsigned)>& say) {
  for (unsigned r = 0; r < world; ++r)
    d.write(fmt::format("metrics_rank{}.jsonl", r), metrics(r, r < world / 2 ? "n1" : "n2", world, 4, 0.01, 0.002, false));
  for (const auto& dump : dumps) {
    FlightRecorder recorder;
    for (std::uint64_t s = 0; s < dump.completed; ++s) recorder.end(recorder.begin("allreduce(grads)", 4096));
    if (dump.in_flight) (void)recorder.begin("allreduce(grads)", 4096);
    recorder.dump((d.path / fmt::format("flight_rank{}.json", dump.rank)).string(), dump.rank, say(dump.rank),
                  dump.failure);
  }
}

std::vector<unsigned> ranks_of(const std::vector<RankNode>& v) {
  std::vector<unsigned> out;
  for (const auto& n : v) out.push_back(n.rank);
  return out;
}

// What a verdict concludes, without the evidence (which quotes the reasons).
struct Conclusion {
  Kind kind;
  std::optional<std::uint64_t> seq;
  std::vector<unsigned> never_arrived, waited;
  std::vector<double> waited_s;
  std::vector<std::string> culprit_nodes;
  std::size_t mismatches;
};

Conclusion conclude(const RunDir& d) {
  const Verdict v = diagnose(d.path);
  INFO(format_text(v));
  Conclusion c{v.kind, v.collective ? std::optional(v.collective->seq) : std::nullopt, ranks_of(v.never_arrived),
               ranks_of(v.waited), {}, v.culprit_nodes, v.mismatches.size()};
  for (const auto& w : v.waited) c.waited_s.push_back(w.seconds);
  return c;
}

// The same dumps three times: plain words, other words, and the old backends' phrases naming
// ranks the fields do not name (rank 0 "waiting for" and "died", which a reader of prose would take).
Conclusion same_under_any_words(unsigned world, const std::vector<Dump>& dumps) {
  RunDir plain, reworded, misleading;
  write_run(plain, world, dumps, [](unsigned r) { return fmt::format("step 5: rank {} gave up", r); });
  write_run(reworded, world, dumps, [](unsigned) { return std::string("quelque chose s'est mal passé"); });
  write_run(misleading, world, dumps, [](unsigned r) {
    return fmt::format("step 5: shm: rank {}: allreduce #5 (arrive) timed out after 99000 ms waiting for rank(s) 0; "
                       "rank 0 (pid 1) died; aborted because rank 0 failed",
                       r);
  });
  const Conclusion a = conclude(plain), b = conclude(reworded), c = conclude(misleading);
  for (const Conclusion* x : {&b, &c}) {
    CHECK(x->kind == a.kind);
    CHECK(x->seq == a.seq);
    CHECK(x->never_arrived == a.never_arrived);
    CHECK(x->waited == a.waited);
    CHECK(x->waited_s == a.waited_s);
    CHECK(x->culprit_nodes == a.culprit_nodes);
    CHECK(x->mismatches == a.mismatches);
  }
  return a;
}

}  // namespace

TEST_CASE("fields: a timeout naming rank 3 is a hang; no rewording of the messages changes it") {
  const CollectiveFailure late{FailureKind::Timeout, {3}, 3.0};
  const Conclusion c = same_under_any_words(4, {{0, 4, true, late}, {1, 4, true, late}, {2, 4, true, late}});
  CHECK(c.kind == Kind::Hang);
  CHECK(c.seq == 5u);
  CHECK(c.never_arrived == std::vector<unsigned>{3});
  CHECK(c.waited == std::vector<unsigned>{0, 1, 2});
  CHECK(c.waited_s == std::vector<double>{3.0, 3.0, 3.0});
  CHECK(c.culprit_nodes == std::vector<std::string>{"n2"});
}

TEST_CASE("fields: a dead peer is a failure naming it, an abort's name counts only when nobody else is named") {
  const CollectiveFailure died{FailureKind::DeadPeer, {2}};
  // Rank 3 was aborted because rank 1 failed first; rank 1 arrived, so only rank 2 is the culprit.
  const Conclusion c = same_under_any_words(
      4, {{0, 4, true, died}, {1, 4, true, died}, {3, 4, true, CollectiveFailure{FailureKind::Aborted, {1}}}});
  CHECK(c.kind == Kind::Failure);
  CHECK(c.never_arrived == std::vector<unsigned>{2});
  CHECK(c.culprit_nodes == std::vector<std::string>{"n2"});
}

TEST_CASE("fields: a transport failure names nobody, whatever its words; a recorder that stops earlier does") {
  const CollectiveFailure transport{FailureKind::Transport, {}};
  // Rank 3's recorder stops earlier: its own file says it never arrived, whatever the others say.
  const Conclusion c = same_under_any_words(
      4, {{0, 4, true, transport}, {1, 4, true, transport}, {2, 4, true, transport},
          {3, 4, false, CollectiveFailure{FailureKind::Timeout, {}, 5.0}}});
  CHECK(c.kind == Kind::Failure);  // no waiter timed out
  CHECK(c.never_arrived == std::vector<unsigned>{3});
}

TEST_CASE("fields: a mismatch a backend found is a mismatch even where the recorded ops agree") {
  const Conclusion c = same_under_any_words(2, {{0, 4, true, CollectiveFailure{FailureKind::Mismatch, {1}}},
                                                {1, 4, true, CollectiveFailure{FailureKind::Mismatch, {0}}}});
  CHECK(c.kind == Kind::Mismatch);
  CHECK(c.seq == 5u);
  CHECK(c.mismatches == 2);
  CHECK(c.culprit_nodes.empty());
}

TEST_CASE("fields: damaged failure fields are said and not used; the reason is not read in their place") {
  RunDir d;
  for (unsigned r = 0; r < 2; ++r) d.write(fmt::format("metrics_rank{}.jsonl", r), metrics(r, "n1", 2, 4, 0.01, 0.002, false));
  const std::string ops = R"j("ops":[{"seq":5,"op":"allreduce(grads)","bytes":8,"start_s":1.0,"end_s":null}])j";
  const std::string prose = "timed out after 3000 ms waiting for rank(s) 1";
  d.write("flight_rank0.json", fmt::format(R"({{"rank":0,"reason":"{}","failure":"exploded","failure_ranks":[1],)"
                                           R"("last_completed":4,"in_flight":5,{}}})",
                                           prose, ops));
  std::string said;
  SECTION("a kind this doctor does not know") { said = "failure 'exploded' is not one this doctor knows"; }
  SECTION("ranks that are not a list of ranks") {
    said = "failure_ranks is not a list of ranks";
    d.write("flight_rank0.json", fmt::format(R"({{"rank":0,"reason":"{}","failure":"dead_peer","failure_ranks":[1,"x"],)"
                                             R"("last_completed":4,"in_flight":5,{}}})",
                                             prose, ops));
  }
  SECTION("ranks at or above the largest rank read") {
    d.write("flight_rank0.json", fmt::format(R"({{"rank":0,"reason":"{}","failure":"dead_peer","failure_ranks":[99999999],)"
                                             R"("last_completed":4,"in_flight":5,{}}})",
                                             prose, ops));
  }
  const RunData run = read_run(d.path);
  REQUIRE(run.ranks.size() == 2);
  // Never the reason's "rank(s) 1": a dump with fields is never read as prose.
  CHECK((!run.ranks[0].failure || run.ranks[0].failure->ranks.empty()));
  bool noted = said.empty();
  for (const auto& n : run.notes) noted = noted || n.find(said) != std::string::npos;
  CHECK(noted);
  const Verdict v = diagnose(run);
  INFO(format_text(v));
  CHECK(v.kind != Kind::Hang);
}
