// trainrt/cpu_count.hpp: the CPUs of the affinity mask, at any machine size.
#include <sched.h>

#include <catch2/catch.hpp>

#include "trainrt/cpu_count.hpp"

// The count follows the calling thread's affinity mask (what a Slurm binding or taskset sets),
// not the machine's cores.
TEST_CASE("affinity_cpu_count counts the mask the thread runs under", "[cpu_count]") {
  cpu_set_t before;
  CPU_ZERO(&before);
  REQUIRE(sched_getaffinity(0, sizeof before, &before) == 0);
  const unsigned all = trainrt::affinity_cpu_count();
  CHECK(all == static_cast<unsigned>(CPU_COUNT(&before)));
  CHECK(all >= 1);

  int first = -1;
  for (int c = 0; c < CPU_SETSIZE && first < 0; ++c)
    if (CPU_ISSET(c, &before)) first = c;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  REQUIRE(sched_setaffinity(0, sizeof one, &one) == 0);
  const unsigned pinned = trainrt::affinity_cpu_count();
  REQUIRE(sched_setaffinity(0, sizeof before, &before) == 0);
  CHECK(pinned == 1);
}
