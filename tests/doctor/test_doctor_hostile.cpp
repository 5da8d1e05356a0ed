// The doctor's reader against what someone else may leave in a run folder: links and
// FIFOs are not opened, files are read as they stream with per-rank and per-run keeps, a long
// metrics file is read from its end, and a file that exists but cannot be read stops the verdict.
// The cases that need another uid are in hostile_doctor.py (users).
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "fixture.hpp"
#include "trainrt/doctor/doctor.hpp"

using namespace trainrt::testing;
using namespace trainrt::doctor;

namespace {

bool has_note(const std::vector<std::string>& notes, const std::string& part) {
  for (const auto& n : notes)
    if (n.find(part) != std::string::npos) return true;
  return false;
}

void hung_world(const RunDir& d, unsigned world) {
  for (unsigned r = 0; r < world; ++r)
    d.write(fmt::format("metrics_rank{}.jsonl", r), metrics(r, r < world / 2 ? "nodeA" : "nodeB", world, 4, 0.01, 0.002, false));
  for (unsigned r = 0; r + 1 < world; ++r)
    d.write(fmt::format("flight_rank{}.json", r), flight(r, 4, 5, timeout_reason(r, 5, std::to_string(world - 1))));
}

}  // namespace

TEST_CASE("hostile: rank files that are links or FIFOs are refused without being opened") {
  RunDir d;
  hung_world(d, 4);
  RunDir outside;
  outside.write("flight.json", flight(3, 5, std::nullopt, "watchdog: no step progress"));
  fs::create_symlink(outside.path / "flight.json", d.path / "flight_rank3.json");
  REQUIRE(::mkfifo((d.path / "metrics_rank4.jsonl").c_str(), 0644) == 0);
  const RunData run = read_run(d.path);
  CHECK(run.errors.empty());
  CHECK(has_note(run.notes, "flight_rank3.json: a symbolic link, not a regular file: not read"));
  CHECK(has_note(run.notes, "metrics_rank4.jsonl: a FIFO, not a regular file: not read"));
  for (const auto& rd : run.ranks) CHECK((rd.rank != 3 || !rd.have_flight));
  const Verdict v = diagnose(run);
  INFO(format_text(v));
  CHECK(v.kind == Kind::Hang);  // the link's content (rank 3's own recorder) was not used
  REQUIRE(v.never_arrived.size() == 1);
  CHECK(v.never_arrived[0].evidence.find("named by rank") != std::string::npos);
}

TEST_CASE("hostile: a metrics file longer than its cap is read from its end, where the last attempt is") {
  RunDir d;
  // An attempt at world 8 that fills the file, then the last attempt at world 2 at its end.
  std::string first = metrics(0, "old", 8, 400, 0.01, 0.002, false, 500);
  d.write("metrics_rank0.jsonl", first + metrics(0, "new", 2, 20, 0.01, 0.002, true, 1000));
  d.write("metrics_rank1.jsonl", metrics(1, "new", 2, 20, 0.01, 0.002, true, 1000));
  Limits lim;
  lim.max_metrics_bytes = 8192;
  const RunData run = read_run(d.path, lim);
  REQUIRE(run.ranks.size() == 2);
  CHECK(run.ranks[0].world == 2u);
  CHECK(run.ranks[0].node == "new");
  CHECK(run.ranks[0].last_step == 20u);
  CHECK(run.world == 2u);
  CHECK(has_note(run.notes, "metrics_rank0.jsonl: " + std::to_string(first.size() + metrics(0, "new", 2, 20, 0.01, 0.002, true, 1000).size()) +
                                " bytes: only the last 8192 read"));
}

TEST_CASE("hostile: the run's byte budget is shared, and a flight file it cannot hold is an error") {
  RunDir d;
  hung_world(d, 4);
  Limits lim;
  lim.max_total_bytes = 600;  // less than the flight files together
  const RunData run = read_run(d.path, lim);
  REQUIRE_FALSE(run.errors.empty());
  CHECK(run.errors.front().find("not read: the run's files are larger than the 600 bytes read in all") != std::string::npos);
  const Verdict v = diagnose(run);
  CHECK(v.kind == Kind::BadInput);
  CHECK(exit_code(v) == 2);
  CHECK(v.culprit_nodes.empty());
  CHECK(v.summary.find("cannot tell") == 0);
}

TEST_CASE("hostile: per-rank keeps shrink with the number of ranks, and strings are cut on a character boundary") {
  RunDir d;
  std::string ops;
  for (int i = 1; i <= 100; ++i)
    ops += fmt::format(R"({}{{"seq":{},"op":"allreduce","bytes":8,"start_s":1,"end_s":2}})", i > 1 ? "," : "", i);
  const std::string reason = std::string(1023, 'r') + "\xc3\xa9" + std::string(5000, 's');
  for (unsigned r = 0; r < 2; ++r) {
    d.write(fmt::format("flight_rank{}.json", r),
            fmt::format(R"({{"rank":{},"reason":"{}","last_completed":100,"in_flight":null,"ops":[{}]}})", r, reason, ops));
    std::string m = metrics(r, "n", 2, 0, 0.01, 0.002, false);
    for (int s = 1; s <= 100; ++s) m += fmt::format(R"({{"event":"step","step":{},"step_s":0.01}})" "\n", s);
    d.write(fmt::format("metrics_rank{}.jsonl", r), m);
  }
  Limits lim;
  lim.max_total_ops = 60;    // 30 per rank
  lim.max_total_steps = 20;  // 10 per rank, but never fewer than 16
  const RunData run = read_run(d.path, lim);
  REQUIRE(run.ranks.size() == 2);
  CHECK(run.ranks[0].ops.size() == 30);
  CHECK(run.ranks[0].ops.front().seq == 71);
  CHECK(run.ranks[0].compute_s.size() == 16);
  CHECK(run.ranks[0].reason == std::string(1023, 'r'));  // 1024 bytes would split the é
}

TEST_CASE("hostile: JSON read as it streams keeps the document's meaning: the last duplicate wins, types are checked") {
  RunDir d;
  d.write("metrics_rank0.jsonl",
          R"({"event":"start","world":1,"world":"x","node":{"a":1},"node":"n","rank":0,"wall":1000})" "\n"
          R"({"event":"step","step":1,"step_s":0.5,"step_s":[1],"wall":1001})" "\n"
          R"({"event":"step","step":2,"step_s":0.25,"wall":1002,"extra":{"deep":[[[[1]]]]}})" "\n");
  d.write("flight_rank0.json",
          R"({"rank":0,"ops":[{"seq":1,"bytes":1,"start_s":1}],"reason":"first",)"
          R"("ops":[{"seq":2,"bytes":2,"start_s":2,"op":{"x":1}},5,[1,2],{"seq":-3,"bytes":1,"start_s":1}],"reason":"second"})");
  const RunData run = read_run(d.path);
  REQUIRE(run.ranks.size() == 1);
  const RankData& r = run.ranks[0];
  CHECK_FALSE(r.world);  // the last "world" is a string
  CHECK(r.node == "n");
  CHECK(r.last_step == 2u);
  REQUIRE(r.compute_s.size() == 1);  // step 1's last step_s is an array: not a valid step
  CHECK(r.compute_s[0] == 0.25);
  REQUIRE(r.have_flight);
  CHECK(r.reason == "second");
  REQUIRE(r.ops.size() == 1);  // the second "ops" replaces the first; 5, [1,2] and seq -3 are not ops
  CHECK(r.ops[0].seq == 2);
  CHECK(r.ops[0].op == "?");
  CHECK(has_note(run.notes, "flight_rank0.json: 3 op records without a valid seq, bytes or start_s"));
}
