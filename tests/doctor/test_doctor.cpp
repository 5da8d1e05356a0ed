// trainrt-doctor's library on crafted run folders: healthy, hung, mismatched, straggling, and
// damaged in the ways a killed rank or a hostile file damages them.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
#include <chrono>
#include <nlohmann/json.hpp>

#include "fixture.hpp"
#include "trainrt/doctor/doctor.hpp"
#include "trainrt/error.hpp"

using namespace trainrt::testing;
using namespace trainrt::doctor;

namespace {

void healthy_world(const RunDir& d, unsigned world, unsigned steps = 20) {
  for (unsigned r = 0; r < world; ++r)
    d.write(fmt::format("metrics_rank{}.jsonl", r), metrics(r, r < world / 2 ? "nodeA" : "nodeB", world, steps, 0.010, 0.002));
}

// Two nodes of two ranks each (ranks 0-1 on the first), each start event naming the rank's local
// rank as a multi-node run's do; the metrics stop without an end event after `steps` steps.
void two_nodes_of_two(const RunDir& d, const std::string& first, const std::string& second, unsigned steps) {
  for (unsigned r = 0; r < 4; ++r) {
    std::string m = metrics(r, r < 2 ? first : second, 4, steps, 0.01, 0.002, false);
    const std::string key = fmt::format(R"("rank":{}}})", r);
    m.replace(m.find(key), key.size(), fmt::format(R"("rank":{},"local_rank":{}}})", r, r % 2));
    d.write(fmt::format("metrics_rank{}.jsonl", r), m);
  }
}

// A dump with its failure fields, as FlightRecorder::dump writes them; `extra` goes in as written.
std::string with_failure(std::string dump, const char* kind, const char* ranks, const std::string& extra = "") {
  const std::string key = R"("last_completed")";
  return dump.replace(dump.find(key), key.size(), fmt::format(R"("failure":"{}","failure_ranks":[{}],{}{})", kind, ranks, extra, key));
}

}  // namespace

TEST_CASE("a healthy run is healthy, exit 0") {
  RunDir d;
  healthy_world(d, 4);
  const Verdict v = diagnose(d.path);
  INFO(format_text(v));
  CHECK(v.kind == Kind::Healthy);
  CHECK(exit_code(v) == 0);
  CHECK(v.notes.empty());
  CHECK(v.world == 4u);
  CHECK(v.culprit_nodes.empty());
}

TEST_CASE("one rank never arrived at collective N: named with its node, the others waited") {
  RunDir d;
  healthy_world(d, 4, 4);
  for (unsigned r = 0; r < 4; ++r)
    d.write(fmt::format("metrics_rank{}.jsonl", r), metrics(r, r < 2 ? "nodeA" : "nodeB", 4, 4, 0.01, 0.002, false));
  for (unsigned r = 0; r < 3; ++r) d.write(fmt::format("flight_rank{}.json", r), flight(r, 4, 5, timeout_reason(r, 5, "3")));
  const Verdict v = diagnose(d.path);
  INFO(format_text(v));
  REQUIRE(v.kind == Kind::Hang);
  CHECK(exit_code(v) == 1);
  REQUIRE(v.collective);
  CHECK(v.collective->seq == 5);
  CHECK(v.collective->op == "allreduce(grads)");
  CHECK(v.collective->bytes == 4096);
  REQUIRE(v.never_arrived.size() == 1);
  CHECK(v.never_arrived[0].rank == 3);
  CHECK(v.never_arrived[0].node == "nodeB");
  REQUIRE(v.waited.size() == 3);
  CHECK(v.waited[0].seconds == Approx(10.0));
  CHECK(v.culprit_nodes == std::vector<std::string>{"nodeB"});
  const std::string text = format_text(v);
  CHECK(text.find("never arrived: rank 3 on nodeB") != std::string::npos);
  CHECK(text.find("exclude on rerun: nodeB") != std::string::npos);
}

TEST_CASE("a rank whose own recorder stops earlier never arrived; without any naming the silent rank is presumed") {
  RunDir d;
  for (unsigned r = 0; r < 3; ++r) d.write(fmt::format("metrics_rank{}.jsonl", r), metrics(r, fmt::format("n{}", r), 3, 6, 0.01, 0.002, false));
  SECTION("its own watchdog dumped it") {
    d.write("flight_rank0.json", flight(0, 6, 7, "step 7: nccl: allreduce did not complete within 30000 ms"));
    d.write("flight_rank1.json", flight(1, 6, 7, "step 7: nccl: allreduce did not complete within 30000 ms"));
    d.write("flight_rank2.json", flight(2, 6, std::nullopt, "watchdog: no step progress for 32.0 s (timeout 32000 ms)"));
    const Verdict v = diagnose(d.path);
    INFO(format_text(v));
    REQUIRE(v.kind == Kind::Hang);
    REQUIRE(v.never_arrived.size() == 1);
    CHECK(v.never_arrived[0].rank == 2);
    CHECK(v.never_arrived[0].node == "n2");
    CHECK(v.waited.size() == 2);
    CHECK(v.waited[0].seconds == Approx(30.0));
  }
  SECTION("no flight file and no name: presumed") {
    d.write("flight_rank0.json", flight(0, 6, 7, "step 7: lost connection"));
    d.write("flight_rank1.json", flight(1, 6, 7, "step 7: lost connection"));
    const Verdict v = diagnose(d.path);
    INFO(format_text(v));
    REQUIRE(v.kind == Kind::Failure);  // no wait timed out: a peer failure, not a hang
    REQUIRE(v.never_arrived.size() == 1);
    CHECK(v.never_arrived[0].rank == 2);
    CHECK(v.never_arrived[0].evidence.find("presumed") != std::string::npos);
    CHECK(v.culprit_nodes == std::vector<std::string>{"n2"});
  }
  SECTION("a silent rank whose metrics end with its run's end is not presumed") {
    d.write("metrics_rank2.jsonl", metrics(2, "n2", 3, 6, 0.01, 0.002, true));
    d.write("flight_rank0.json", flight(0, 6, 7, "step 7: lost connection"));
    d.write("flight_rank1.json", flight(1, 6, 7, "step 7: lost connection"));
    const Verdict v = diagnose(d.path);
    INFO(format_text(v));
    CHECK(v.never_arrived.empty());
    CHECK(v.culprit_nodes.empty());
    CHECK(v.waited.size() == 2);
    CHECK(has_note(v, "rank(s) 2 ended their run"));
  }
  SECTION("a dead rank named by its peers") {
    d.write("flight_rank0.json", flight(0, 6, 7, "step 7: shm: rank 0: allreduce #7 (arrive): rank 1 (pid 4242) died"));
    d.write("flight_rank2.json", flight(2, 6, 7, "step 7: shm: rank 2: allreduce #7 (arrive) aborted because rank 1 failed"));
    const Verdict v = diagnose(d.path);
    INFO(format_text(v));
    CHECK(v.kind == Kind::Failure);
    CHECK(v.summary.find("peer failure at collective #7") != std::string::npos);
    REQUIRE(v.never_arrived.size() == 1);
    CHECK(v.never_arrived[0].rank == 1);
    CHECK(v.culprit_nodes == std::vector<std::string>{"n1"});
  }
}

// What a real 2-node run under srun left (tests/slurm/culprit.sh): shared memory inside each node,
// Gloo between the nodes' leaders (ranks 0 and 2); rank 2 stalled. Rank 3's "shm: rank 1: ...
// waiting for rank(s) 0" counts within node n2, so it names rank 2; rank 1's "because rank 0
// failed" names its own leader, which was itself waiting (across nodes) and is no culprit.
TEST_CASE("two nodes (shm inside, Gloo between): local rank names mapped, a waiter named by a cascade is no culprit") {
  RunDir d;
  two_nodes_of_two(d, "n1", "n2", 7);
  d.write("flight_rank0.json",
          flight(0, 7, 8, "step 8: gloo: rank 0: [tcp/unbound_buffer.cc:81] Timed out waiting 3000ms for recv operation to complete"));
  d.write("flight_rank1.json", flight(1, 7, 8, "step 8: shm: rank 1: broadcast #60 (stage) aborted because rank 0 failed"));
  d.write("flight_rank3.json",
          flight(3, 7, 8, "step 8: shm: rank 1: allreduce #59 (stage) timed out after 3000 ms waiting for rank(s) 0"));
  SECTION("the stalled rank's watchdog dumped its recorder") {
    d.write("flight_rank2.json", flight(2, 7, std::nullopt, "watchdog: no step progress for 5.1 s (timeout 5000 ms)"));
  }
  SECTION("the stalled rank was killed before its watchdog fired: named by its node's peer") {}
  const Verdict v = diagnose(d.path);
  INFO(format_text(v));
  REQUIRE(v.kind == Kind::Hang);
  REQUIRE(v.never_arrived.size() == 1);
  CHECK(v.never_arrived[0].rank == 2);
  CHECK(v.never_arrived[0].node == "n2");
  CHECK(v.waited.size() == 3);
  CHECK(v.culprit_nodes == std::vector<std::string>{"n2"});
}

TEST_CASE("a rank that arrived late, after the others gave up, is still the one named") {
  RunDir d;
  for (unsigned r = 0; r < 3; ++r) d.write(fmt::format("metrics_rank{}.jsonl", r), metrics(r, "n1", 3, 4, 0.01, 0.002, false));
  d.write("flight_rank0.json", flight(0, 4, 5, timeout_reason(0, 5, "2")));
  d.write("flight_rank1.json", flight(1, 4, 5, timeout_reason(1, 5, "2")));
  d.write("flight_rank2.json", flight(2, 4, 5, "step 5: shm: rank 2: allreduce #5 (arrive) aborted because rank 0 failed"));
  const Verdict v = diagnose(d.path);
  INFO(format_text(v));
  REQUIRE(v.never_arrived.size() == 1);
  CHECK(v.never_arrived[0].rank == 2);
}

// What slurm.recovery's run left once (CI of ca8f318): trt-n2's ranks SIGKILLed while every rank was
// in the trainer's stop agreement, a collective between two gradient allreduces that the recorder
// does not number. The survivors' dumps stop after #42, as the killed ranks' metrics do; the
// survivors are the ones that arrived (their collective failed under them), the silent ones the
// culprits. Taking the survivors for laggards named the wrong node.
TEST_CASE("ranks killed in a collective the recorder does not number: the silent ones, not the survivors") {
  RunDir d;
  two_nodes_of_two(d, "trt-n1", "trt-n2", 41);
  d.write("flight_rank0.json",
          with_failure(flight(0, 42, std::nullopt,
                              "step 42: gloo: rank 0: [./gloo/transport/tcp/pair.cc:589] Read error [10.77.0.12]:19127: "
                              "Connection reset by peer"),
                       "transport", ""));
  d.write("flight_rank1.json",
          with_failure(flight(1, 42, std::nullopt, "step 42: shm: rank 1: broadcast #254 (stage) aborted because rank 0 failed"),
                       "aborted", "0"));
  SECTION("both survivors dumped") {}
  SECTION("a dump without a collective failure still lags: rank 1 stuck in compute") {
    d.write("flight_rank1.json",
            with_failure(flight(1, 42, std::nullopt, "watchdog: no step progress for 5.1 s (timeout 5000 ms)"), "timeout", ""));
    const Verdict v = diagnose(d.path);
    INFO(format_text(v));
    REQUIRE(v.never_arrived.size() == 1);
    CHECK(v.never_arrived[0].rank == 1);
    return;
  }
  const Verdict v = diagnose(d.path);
  INFO(format_text(v));
  REQUIRE(v.kind == Kind::Failure);
  CHECK(v.summary.find("a collective after #42 (the flight recorder does not number it)") != std::string::npos);
  REQUIRE(v.never_arrived.size() == 2);
  CHECK(v.never_arrived[0].rank == 2);
  CHECK(v.never_arrived[1].rank == 3);
  CHECK(v.waited.size() == 2);
  CHECK(v.culprit_nodes == std::vector<std::string>{"trt-n2"});
}

// A dump written inside an unnumbered collective says so ("unnumbered"): a watchdog timeout there
// names nobody, yet the rank was waiting for a peer. Rank 2 stalled after step 42's update (no
// "unnumbered": it was in its own code), the others waited in step 43's stop agreement.
TEST_CASE("a rank stalled between collectives: the others' watchdog dumps inside the stop agreement do not lag") {
  RunDir d;
  two_nodes_of_two(d, "trt-n1", "trt-n2", 42);
  const auto watchdog = [](unsigned rank, bool inside) {
    return with_failure(flight(rank, 42, std::nullopt, "watchdog: no step progress for 5.1 s (timeout 5000 ms)"), "timeout", "",
                        inside ? R"x("unnumbered":"allreduce(stop agreement)","unnumbered_start_s":43.2,)x" : "");
  };
  for (unsigned r : {0u, 1u, 3u}) d.write(fmt::format("flight_rank{}.json", r), watchdog(r, true));
  SECTION("the stalled rank's own watchdog dumped too") { d.write("flight_rank2.json", watchdog(2, false)); }
  SECTION("the stalled rank left no dump") {}
  const Verdict v = diagnose(d.path);
  INFO(format_text(v));
  REQUIRE(v.kind == Kind::Hang);
  CHECK(v.summary.find("allreduce(stop agreement) after #42 (the flight recorder does not number it)") != std::string::npos);
  REQUIRE(v.never_arrived.size() == 1);
  CHECK(v.never_arrived[0].rank == 2);
  CHECK(v.waited.size() == 3);
  CHECK(v.culprit_nodes == std::vector<std::string>{"trt-n2"});
  CHECK(!v.collective);
}

// Rank 3 handed in its part of #43 and stalled inside it (SIGSTOP); the node-local phase let the
// others complete #43 and go on to step 44's stop agreement, where their watchdogs fired. Rank 3's
// own dump (written when it resumed) has it in #43: it is behind, not the others.
TEST_CASE("a rank stalled inside a collective the others completed: it is the one named") {
  RunDir d;
  two_nodes_of_two(d, "trt-n1", "trt-n2", 43);
  for (unsigned r : {0u, 1u, 2u})
    d.write(fmt::format("flight_rank{}.json", r),
            with_failure(flight(r, 43, std::nullopt, "watchdog: no step progress for 5.1 s (timeout 5000 ms)"), "timeout", "",
                         R"x("unnumbered":"allreduce(stop agreement)",)x"));
  SECTION("its watchdog dumped inside #43") {
    d.write("flight_rank3.json", with_failure(flight(3, 42, 43, "watchdog: no step progress for 9.0 s (timeout 5000 ms)"),
                                              "timeout", ""));
  }
  SECTION("it left no dump") {}
  const Verdict v = diagnose(d.path);
  INFO(format_text(v));
  REQUIRE(v.kind == Kind::Hang);
  REQUIRE(v.never_arrived.size() == 1);
  CHECK(v.never_arrived[0].rank == 3);
  CHECK(v.waited.size() == 3);
  CHECK(v.culprit_nodes == std::vector<std::string>{"trt-n2"});
}

// A node cut off: every rank, on both sides, waits in the stop agreement. Nobody lagged by its own
// recorder, so nobody is named from it (naming every node would exclude them all).
TEST_CASE("every rank inside the stop agreement: nobody named from the recorders") {
  RunDir d;
  two_nodes_of_two(d, "trt-n1", "trt-n2", 42);
  for (unsigned r = 0; r < 4; ++r)
    d.write(fmt::format("flight_rank{}.json", r),
            with_failure(flight(r, 42, std::nullopt, "watchdog: no step progress for 5.1 s (timeout 5000 ms)"), "timeout", "",
                         R"x("unnumbered":"allreduce(stop agreement)",)x"));
  const Verdict v = diagnose(d.path);
  INFO(format_text(v));
  CHECK(v.kind == Kind::Hang);
  CHECK(v.never_arrived.empty());
  CHECK(v.waited.size() == 4);
  CHECK(v.culprit_nodes.empty());
}

// A link down between two nodes, in a numbered collective: each leader timed out naming nobody,
// each node's other rank aborted because its leader failed. The aborts name a rank on both nodes:
// that singles out neither, and excluding both would leave no rerun.
TEST_CASE("aborts naming a rank on every node single out none") {
  RunDir d;
  two_nodes_of_two(d, "trt-n1", "trt-n2", 42);
  for (unsigned leader : {0u, 2u}) {
    d.write(fmt::format("flight_rank{}.json", leader),
            with_failure(flight(leader, 42, 43, "step 43: gloo: timed out"), "timeout", ""));
    d.write(fmt::format("flight_rank{}.json", leader + 1),
            with_failure(flight(leader + 1, 42, 43, fmt::format("step 43: shm: aborted because rank {} failed", leader)),
                         "aborted", std::to_string(leader).c_str()));
  }
  SECTION("both nodes named: none kept") {
    const Verdict v = diagnose(d.path);
    INFO(format_text(v));
    CHECK(v.kind == Kind::Hang);
    CHECK(v.never_arrived.empty());
    CHECK(v.culprit_nodes.empty());
    CHECK(has_note(v, "no node is singled out"));
  }
  SECTION("only trt-n2's leader named: it stays the culprit") {
    d.write("flight_rank1.json", with_failure(flight(1, 42, 43, "step 43: shm: aborted because rank 2 failed"), "aborted", "2"));
    const Verdict v = diagnose(d.path);
    INFO(format_text(v));
    REQUIRE(v.never_arrived.size() == 1);
    CHECK(v.never_arrived[0].rank == 2);
    CHECK(v.culprit_nodes == std::vector<std::string>{"trt-n2"});
  }
}

TEST_CASE("mismatched ops across ranks: the first differing sequence number, every variant") {
  RunDir d;
  healthy_world(d, 2, 5);
  d.write("flight_rank0.json", flight(0, 6, 7, "step 7: mismatched", "allreduce(grads)", 4096));
  d.write("flight_rank1.json", flight(1, 6, 7, "step 7: mismatched", "broadcast(params)", 8));
  const Verdict v = diagnose(d.path);
  INFO(format_text(v));
  REQUIRE(v.kind == Kind::Mismatch);
  CHECK(exit_code(v) == 1);
  REQUIRE(v.collective);
  CHECK(v.mismatches.size() == 2);
  CHECK(v.culprit_nodes.empty());  // a program bug: excluding a node would not help
}

TEST_CASE("a straggler: compute time (step minus allreduce), not step time, names it") {
  RunDir d;
  // Every rank's step takes 15 ms; rank 2 spends 12 of them computing, the others wait for it.
  for (unsigned r = 0; r < 4; ++r) {
    const bool slow = r == 2;
    d.write(fmt::format("metrics_rank{}.jsonl", r), metrics(r, fmt::format("node{}", r), 4, 30, slow ? 0.012 : 0.006, slow ? 0.003 : 0.009));
  }
  const Verdict v = diagnose(d.path);
  INFO(format_text(v));
  REQUIRE(v.kind == Kind::Stragglers);
  CHECK(exit_code(v) == 1);
  REQUIRE(v.stragglers.size() == 1);
  CHECK(v.stragglers[0].rank == 2);
  CHECK(v.stragglers[0].node == "node2");
  CHECK(v.stragglers[0].excess == Approx(1.0));
  CHECK(v.culprit_nodes.empty());
  Options loose;
  loose.straggler_threshold = 1.5;
  CHECK(diagnose(d.path, loose).kind == Kind::Healthy);
}

TEST_CASE("truncated files: a cut flight recorder is not used, a cut metrics line is said") {
  RunDir d;
  healthy_world(d, 3, 4);
  for (unsigned r = 0; r < 3; ++r) d.write(fmt::format("metrics_rank{}.jsonl", r), metrics(r, "n", 3, 4, 0.01, 0.002, false));
  d.append("metrics_rank1.jsonl", R"({"event":"step","step":5,"wall":12.)");
  const std::string f = flight(1, 4, 5, timeout_reason(1, 5, "2"));
  d.write("flight_rank0.json", flight(0, 4, 5, timeout_reason(0, 5, "2")));
  d.write("flight_rank1.json", f.substr(0, f.size() / 2));
  const Verdict v = diagnose(d.path);
  INFO(format_text(v));
  CHECK(has_note(v, "metrics_rank1.jsonl: last line cut short"));
  CHECK(has_note(v, "flight_rank1.json: not complete JSON"));
  REQUIRE(v.kind == Kind::Hang);
  REQUIRE(v.never_arrived.size() == 1);
  CHECK(v.never_arrived[0].rank == 2);
}

TEST_CASE("a missing rank file: said, and no clean bill of health (exit 2)") {
  RunDir d;
  healthy_world(d, 4);
  std::filesystem::remove(d.path / "metrics_rank3.jsonl");
  const Verdict v = diagnose(d.path);
  INFO(format_text(v));
  CHECK(has_note(v, "1 rank(s) of 4 left no file: 3"));
  CHECK(v.kind == Kind::BadInput);
  CHECK(exit_code(v) == 2);
}

TEST_CASE("files naming different world sizes or ranks are reported, the majority used") {
  RunDir d;
  healthy_world(d, 3);
  d.write("metrics_rank2.jsonl", metrics(2, "n", 8, 20, 0.010, 0.002));
  d.write("flight_rank1.json", flight(0, 4, 5, "x"));  // names rank 0 inside rank 1's file
  const Verdict v = diagnose(d.path);
  INFO(format_text(v));
  CHECK(v.world == 3u);
  CHECK(has_note(v, "different world sizes: 3 (2 ranks), 8 (1 ranks)"));
  CHECK(has_note(v, "flight_rank1.json: names rank 0, the file name rank 1"));
  CHECK(exit_code(v) == 2);
}

TEST_CASE("huge and garbage numbers are bounded, never allocated for") {
  RunDir d;
  SECTION("world sizes far beyond any cluster") {
    for (unsigned r = 0; r < 2; ++r)
      d.write(fmt::format("metrics_rank{}.jsonl", r), metrics(r, "n", 2, 5, 0.01, 0.002));
    d.append("metrics_rank0.jsonl", R"({"event":"start","wall":1,"world":18446744073709551615,"node":"n"})" "\n");
    d.append("metrics_rank1.jsonl", R"({"event":"start","wall":1,"world":18446744073709551615,"node":"n"})" "\n");
    const auto t0 = std::chrono::steady_clock::now();
    const Verdict v = diagnose(d.path);
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
    INFO(format_text(v));
    CHECK(has_note(v, "above the 65536 ranks read"));
    CHECK(exit_code(v) == 2);
  }
  SECTION("garbage values, names and nesting") {
    d.write("metrics_rank0.jsonl", std::string(R"({"event":"start","wall":1e999,"world":-5})") + "\n" +
                                       R"({"event":"step","step":1.5e300,"step_s":-1})" + "\n" + std::string(200000, '[') +
                                       "\n" + std::string(100000, 'x') + "\n" + "\x01\xff\xfe\n");
    d.write("flight_rank99999999999.json", "{}");
    d.write("flight_rank007.json", "{}");
    d.write("flight_rank0.json", R"({"rank":0,"reason":"r","last_completed":1e400,"in_flight":-1,"ops":[{"seq":"x"},)"
                                 R"({"seq":18446744073709551616,"bytes":1,"start_s":0},{"seq":1,"bytes":1,"start_s":1e308}]})");
    const Verdict v = diagnose(d.path);
    INFO(format_text(v));
    CHECK(has_note(v, "flight_rank99999999999.json: not a rank file name"));
    CHECK(has_note(v, "flight_rank007.json: not a rank file name"));
    CHECK(has_note(v, "longer than"));
    CHECK(exit_code(v) != 0);
  }
  SECTION("nesting bombs below the size limits are refused before parsing") {
    d.write("metrics_rank0.jsonl", metrics(0, "n", 1, 3, 0.01, 0) + std::string(30000, '[') + std::string(30000, ']') + "\n");
    d.write("flight_rank0.json", R"({"rank":0,"ops":)" + std::string(1000000, '[') + std::string(1000000, ']') + "}");
    const Verdict v = diagnose(d.path);
    INFO(format_text(v));
    CHECK(has_note(v, "metrics_rank0.jsonl: line 6 is not a JSON object"));
    CHECK(has_note(v, "flight_rank0.json: not complete JSON"));
  }
  SECTION("a flight file with more ops than kept, and one larger than allowed") {
    std::string ops;
    for (int i = 1; i <= 20000; ++i)
      ops += fmt::format(R"({}{{"seq":{},"op":"allreduce","bytes":8,"start_s":1,"end_s":2}})", i > 1 ? "," : "", i);
    d.write("flight_rank0.json", fmt::format(R"({{"rank":0,"reason":"x","last_completed":20000,"in_flight":null,"ops":[{}]}})", ops));
    d.write("metrics_rank0.jsonl", metrics(0, "n", 1, 3, 0.01, 0));
    Options o;
    auto run = read_run(d.path, o.limits);
    REQUIRE(run.ranks.size() == 1);
    CHECK(run.ranks[0].ops.size() == o.limits.max_ops);
    CHECK(run.ranks[0].ops.back().seq == 20000);
    o.limits.max_flight_bytes = 1000;
    CHECK(has_note(diagnose(d.path, o), "more than the 1000 a flight recorder may have"));
  }
}

TEST_CASE("bad input: no directory throws, an empty one is exit 2") {
  CHECK_THROWS_AS(read_run("/nonexistent/doctor/dir"), trainrt::Error);
  RunDir d;
  const Verdict v = diagnose(d.path);
  CHECK(v.kind == Kind::BadInput);
  CHECK(exit_code(v) == 2);
}

TEST_CASE("output: text escapes control bytes, JSON stays valid UTF-8") {
  CHECK(escape_text("a\nb\x1b[2Jc\\") == "a\\x0ab\\x1b[2Jc\\x5c");
  CHECK(escape_text("n\xc3\xa9ud") == "n\xc3\xa9ud");       // valid UTF-8 kept
  CHECK(escape_text("\xc2\x9b" "x") == "\\xc2\\x9bx");     // C1 control (CSI) escaped
  CHECK(escape_text("\xff\xc3") == "\\xff\\xc3");           // invalid and cut sequences escaped
  RunDir d;
  for (unsigned r = 0; r < 2; ++r)
    d.write(fmt::format("metrics_rank{}.jsonl", r), metrics(r, R"(bad\u001b[2J node\u0007\u00e9)", 2, 3, 0.01, 0.002, false));
  d.write("flight_rank0.json", flight(0, 3, 4, timeout_reason(0, 4, "1") + "\\n\\u001b[31m"));
  const Verdict v = diagnose(d.path);
  const std::string text = format_text(v);
  for (char c : text) CHECK((c == '\n' || static_cast<unsigned char>(c) >= 0x20));
  CHECK(text.find("bad\\x1b[2J node\\x07\xc3\xa9") != std::string::npos);
  for (const auto& n : v.notes) CHECK(n.find("not a JSON object") == std::string::npos);
  const std::string json = format_json(v);
  const auto parsed = nlohmann::json::parse(json);  // throws on invalid UTF-8
  CHECK(parsed["verdict"] == "hang");
  CHECK(parsed["never_arrived"][0]["rank"] == 1);
  CHECK(parsed["exit_code"] == 1);
}

TEST_CASE("JSON output replaces bytes that are not UTF-8 instead of failing") {
  Verdict v;
  v.kind = Kind::Hang;
  v.summary = "cut \xc3";
  v.never_arrived.push_back({1, "node\xff\xfe", "evidence \x80", -1});
  v.notes.push_back("note \xed\xa0\x80");  // an encoded surrogate
  const auto parsed = nlohmann::json::parse(format_json(v));
  CHECK(parsed["never_arrived"][0]["node"] == "node\xef\xbf\xbd\xef\xbf\xbd");
  CHECK(parsed["exit_code"] == 1);
}

TEST_CASE("a rerun on fewer nodes: the dropped ranks' old files are set aside, the new world diagnosed") {
  RunDir d;
  // Attempt 1: 4 ranks on nodeA and nodeB; nodeB hung. Attempt 2: 2 ranks on nodeA, rank 1 hangs.
  for (unsigned r = 0; r < 4; ++r)
    d.write(fmt::format("metrics_rank{}.jsonl", r), metrics(r, r < 2 ? "nodeA" : "nodeB", 4, 5, 0.01, 0.002, false, 1000));
  for (unsigned r = 0; r < 2; ++r)
    d.append(fmt::format("metrics_rank{}.jsonl", r), metrics(r, "nodeA", 2, 3, 0.01, 0.002, false, 2000, 6));
  d.write("flight_rank0.json", flight(0, 3, 4, timeout_reason(0, 9, "1")));
  const Verdict v = diagnose(d.path);
  INFO(format_text(v));
  CHECK(has_note(v, "rank 2: files from an earlier attempt (world 4, the last attempt's is 2)"));
  CHECK(has_note(v, "rank 3: files from an earlier attempt"));
  CHECK(v.world == 2u);
  REQUIRE(v.kind == Kind::Hang);
  REQUIRE(v.never_arrived.size() == 1);
  CHECK(v.never_arrived[0].rank == 1);
  CHECK(v.culprit_nodes == std::vector<std::string>{"nodeA"});
  // and once the shrunk rerun ended cleanly, the run is healthy despite the old ranks' files
  for (unsigned r = 0; r < 2; ++r)
    d.append(fmt::format("metrics_rank{}.jsonl", r), metrics(r, "nodeA", 2, 3, 0.01, 0.002, true, 3000, 6));
  std::filesystem::remove(d.path / "flight_rank0.json");
  const Verdict after = diagnose(d.path);
  INFO(format_text(after));
  CHECK(after.kind == Kind::Healthy);
}
