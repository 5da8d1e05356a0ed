// trainrt-doctor across attempts of one job: a rerun appends to the metrics, a shrink leaves the
// dropped ranks' files, and the files' and nodes' clocks need not agree; only the last attempt's
// files, told by the process that wrote them and by rank 0's world, describe the failure.
#include <catch2/catch.hpp>
#include <chrono>

#include "fixture.hpp"
#include "trainrt/doctor/doctor.hpp"

using namespace trainrt::testing;
using namespace trainrt::doctor;

TEST_CASE("a rerun appends: only the last attempt counts, and an older flight file is stale") {
  RunDir d;
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  for (unsigned r = 0; r < 2; ++r) {
    d.write(fmt::format("metrics_rank{}.jsonl", r), metrics(r, "n", 2, 5, 0.01, 0.002, false, 1000));
    // The rerun started after the flight files below were written, and ended cleanly.
    d.append(fmt::format("metrics_rank{}.jsonl", r), metrics(r, "n", 2, 5, 0.01, 0.002, true, now + 3600, 6));
  }
  d.write("flight_rank0.json", flight(0, 4, 5, timeout_reason(0, 5, "1")));
  const Verdict v = diagnose(d.path);
  INFO(format_text(v));
  CHECK(has_note(v, "flight_rank0.json: written before the rank's last start"));
  CHECK(v.never_arrived.empty());
  CHECK(v.kind == Kind::Healthy);  // an earlier attempt's file set aside is no input problem
}

// The process that wrote each file decides, not the clocks: a flight dumped by the process of the
// rank's last start is current even when its file's time (a file server's clock) is before that
// start; one from another process is an earlier attempt's even when its time looks newer.
TEST_CASE("a flight file is judged by the process that wrote it, not by clocks") {
  RunDir d;
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const auto with_pid = [](std::string m, unsigned pid) {
    const std::string key = R"({"event":"start",)";
    return m.replace(m.find(key), key.size(), fmt::format(R"({{"event":"start","pid":{},)", pid));
  };
  const auto flight_pid = [](std::string f, unsigned rank, unsigned pid) {
    const std::string key = fmt::format(R"({{"rank":{},)", rank);
    return f.replace(f.find(key), key.size(), fmt::format(R"({{"rank":{},"pid":{},)", rank, pid));
  };
  // The node's clock runs an hour ahead of the files' clock: every start is "after" its dumps.
  for (unsigned r = 0; r < 2; ++r)
    d.write(fmt::format("metrics_rank{}.jsonl", r), with_pid(metrics(r, "n", 2, 5, 0.01, 0.002, false, now + 3600), 100 + r));
  SECTION("the same process: a hang of rank 1, found") {
    d.write("flight_rank0.json", flight_pid(flight(0, 4, 5, timeout_reason(0, 5, "1")), 0, 100));
    const Verdict v = diagnose(d.path);
    INFO(format_text(v));
    CHECK(v.kind == Kind::Hang);
    REQUIRE(v.never_arrived.size() == 1);
    CHECK(v.never_arrived[0].rank == 1);
  }
  SECTION("another process: an earlier attempt's, set aside") {
    d.write("flight_rank0.json", flight_pid(flight(0, 4, 5, timeout_reason(0, 5, "1")), 0, 99));
    const Verdict v = diagnose(d.path);
    INFO(format_text(v));
    CHECK(has_note(v, "flight_rank0.json: written before the rank's last start"));
    CHECK(v.never_arrived.empty());
  }
}

// After a shrink (8 ranks -> 6), the lost node's leftover files name the old world; that node's
// clock ran 5 minutes ahead, so their start looks newest. Rank 0's start names the last attempt.
TEST_CASE("a leftover rank beyond the last world is set aside whatever its node's clock says") {
  RunDir d;
  for (unsigned r = 0; r < 6; ++r) {
    d.write(fmt::format("metrics_rank{}.jsonl", r), metrics(r, r < 3 ? "n1" : "n2", 6, 7, 0.01, 0.002, false, 2000));
    if (r != 4) d.write(fmt::format("flight_rank{}.json", r), flight(r, 6, 7, timeout_reason(r, 7, "4")));
  }
  for (unsigned r = 6; r < 8; ++r)
    d.write(fmt::format("metrics_rank{}.jsonl", r), metrics(r, "n4", 8, 30, 0.01, 0.002, false, 2300));
  const Verdict v = diagnose(d.path);
  INFO(format_text(v));
  CHECK(v.world == 6u);
  CHECK(v.kind == Kind::Hang);
  REQUIRE(v.never_arrived.size() == 1);
  CHECK(v.never_arrived[0].rank == 4);
  CHECK(v.culprit_nodes == std::vector<std::string>{"n2"});
}
