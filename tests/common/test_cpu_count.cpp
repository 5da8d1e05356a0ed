// trainrt/cpu_count.hpp: the CPUs of the affinity mask, at any machine size.
#include <sched.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "trainrt/cpu_count.hpp"

namespace {

// The kernel's own account of the calling thread's mask ("0-3,8"), read apart from any cpu_set_t:
// right whatever the number of CPUs.
unsigned allowed_by_proc() {
  std::ifstream status("/proc/thread-self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Cpus_allowed_list:", 0) != 0) continue;
    std::stringstream list(line.substr(line.find(':') + 1));
    std::string range;
    unsigned count = 0;
    while (std::getline(list, range, ',')) {
      const auto dash = range.find('-');
      const unsigned lo = std::stoul(range.substr(0, dash));
      const unsigned hi = dash == std::string::npos ? lo : std::stoul(range.substr(dash + 1));
      count += hi - lo + 1;
    }
    return count;
  }
  return 0;
}

constexpr int kLargeSet = 65536;  // CPUs: wide enough for any machine the test meets
using CpuSet = std::unique_ptr<cpu_set_t, decltype([](cpu_set_t* s) { CPU_FREE(s); })>;

}  // namespace

// The count follows the calling thread's affinity mask (what a Slurm binding or taskset sets),
// not the machine's cores.
TEST_CASE("affinity_cpu_count counts the mask the thread runs under", "[cpu_count]") {
  const unsigned all = trainrt::affinity_cpu_count();
  REQUIRE(allowed_by_proc() >= 1);
  CHECK(all == allowed_by_proc());

  const std::size_t bytes = CPU_ALLOC_SIZE(kLargeSet);
  CpuSet before(CPU_ALLOC(kLargeSet)), one(CPU_ALLOC(kLargeSet));
  REQUIRE(before);
  REQUIRE(one);
  CPU_ZERO_S(bytes, before.get());
  REQUIRE(sched_getaffinity(0, bytes, before.get()) == 0);
  int first = 0;
  while (!CPU_ISSET_S(first, bytes, before.get())) ++first;
  CPU_ZERO_S(bytes, one.get());
  CPU_SET_S(first, bytes, one.get());
  REQUIRE(sched_setaffinity(0, bytes, one.get()) == 0);
  const unsigned pinned = trainrt::affinity_cpu_count();
  REQUIRE(sched_setaffinity(0, bytes, before.get()) == 0);
  CHECK(pinned == 1);
  CHECK(trainrt::affinity_cpu_count() == all);
}
