// detect_stragglers (pure) and the allgather helpers over a real shared-memory communicator, one
// thread per rank.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
#include <cmath>
#include <nlohmann/json.hpp>
#include <thread>

#include "../checkpoint/thread_world.hpp"
#include "trainrt/runtime/stragglers.hpp"
#include "trainrt/runtime/communicator.hpp"
#include "trainrt/runtime/shm_communicator.hpp"

using trainrt::detect_stragglers;
using trainrt::median_of;

TEST_CASE("median of the usable values") {
  const std::vector<double> odd{3, 1, 2}, even{4, 1, 3, 2}, junk{NAN, -1, INFINITY, 5};
  CHECK(median_of(odd) == 2);
  CHECK(median_of(even) == 2.5);
  CHECK(median_of(junk) == 5);
  CHECK(median_of(std::vector<double>{}) == 0);
}

TEST_CASE("stragglers: above the median by more than the threshold, slowest first, with nodes") {
  const std::vector<double> t{0.010, 0.010, 0.016, 0.011, 0.030, 0.010};
  const std::vector<std::string> nodes{"a", "a", "b", "b", "c", "c"};
  auto s = detect_stragglers(t, nodes, 0.2);
  REQUIRE(s.size() == 2);
  CHECK(s[0].rank == 4);
  CHECK(s[0].node == "c");
  CHECK(s[0].excess == Approx(0.030 / 0.0105 - 1));
  CHECK(s[1].rank == 2);
  CHECK(s[1].node == "b");
  // a larger threshold keeps only the worst
  CHECK(detect_stragglers(t, nodes, 1.0).size() == 1);
  // an absolute floor: 6 ms over the median is not enough when 10 ms are required
  CHECK(detect_stragglers(t, nodes, 0.2, 0.010).size() == 1);
}

TEST_CASE("stragglers: equal times, too few ranks, junk values and missing nodes") {
  const std::vector<std::string> none;
  CHECK(detect_stragglers(std::vector<double>{0.01, 0.01, 0.01, 0.01}, none, 0.1).empty());
  CHECK(detect_stragglers(std::vector<double>{0.01}, none, 0.1).empty());
  CHECK(detect_stragglers(std::vector<double>{0.0, 0.0, 0.0}, none, 0.1).empty());  // median 0: no ratio
  auto s = detect_stragglers(std::vector<double>{NAN, 0.01, 0.01, 0.05, -3, INFINITY}, none, 0.5);
  REQUIRE(s.size() == 1);
  CHECK(s[0].rank == 3);
  CHECK(s[0].node.empty());
  CHECK(detect_stragglers(std::vector<double>{0.01, 0.01, 0.05}, none, NAN).empty());
  CHECK(detect_stragglers(std::vector<double>{0.01, 0.01, 0.05}, none, -1).empty());
}

TEST_CASE("the metrics line is valid JSON, the log line names rank and node") {
  std::vector<trainrt::Straggler> s{{3, "node\xff" "2", 0.02, 0.5}};
  const auto line = trainrt::stragglers_metrics_line(40, 0.0133, 0.2, s);
  CHECK(line.find('\n') == std::string::npos);
  const auto j = nlohmann::json::parse(line);
  CHECK(j["event"] == "stragglers");
  CHECK(j["step"] == 40);
  CHECK(j["ranks"][0]["rank"] == 3);
  const auto log = trainrt::stragglers_log_line(40, 0.0133, 0.2, {{3, "node2", 0.02, 0.5}});
  CHECK(log.find("rank 3 on node2") != std::string::npos);
  CHECK(log.find("+50%") != std::string::npos);
}

TEST_CASE("share_step_times and share_node_names over a shared-memory communicator") {
  constexpr unsigned n = 4;
  trainrt::testing::ThreadWorld world(n);
  std::vector<std::vector<double>> times(n);
  std::vector<std::vector<std::string>> names(n);
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (unsigned r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        trainrt::testing::ThreadSession session(world, r);
        auto comm = trainrt::make_shm_communicator(session);
        times[r] = trainrt::share_step_times(*comm, 0.01 * (r + 1));
        // rank 3's name is longer than the 64 bytes shared: cut to 63
        names[r] = trainrt::share_node_names(*comm, r == 3 ? std::string(100, 'x') : "node" + std::to_string(r / 2));
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (unsigned r = 0; r < n; ++r) {
    INFO("rank " << r << ": " << errors[r]);
    REQUIRE(errors[r].empty());
    REQUIRE(times[r].size() == n);
    for (unsigned k = 0; k < n; ++k) CHECK(times[r][k] == Approx(0.01 * (k + 1)));
    CHECK(names[r] == std::vector<std::string>{"node0", "node0", "node1", std::string(63, 'x')});
  }
  auto s = detect_stragglers(times[0], names[0], 0.5);
  REQUIRE(s.size() == 1);
  CHECK(s[0].rank == 3);
}

TEST_CASE("local_node_name prefers SLURMD_NODENAME") {
  ::setenv("SLURMD_NODENAME", "node-from-slurm", 1);
  CHECK(trainrt::local_node_name() == "node-from-slurm");
  ::unsetenv("SLURMD_NODENAME");
  CHECK(!trainrt::local_node_name().empty());
}
