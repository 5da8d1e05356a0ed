#pragma once
// The CPUs this process may run on (its affinity mask: a Slurm step's binding, taskset), which
// is what parallel work and spin-or-sleep choices must count, not the machine's cores. 0 when
// the mask cannot be read: each caller picks its own fallback.
#include <sched.h>

namespace trainrt {

inline unsigned affinity_cpu_count() noexcept {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 0;
  return static_cast<unsigned>(CPU_COUNT(&set));
}

}  // namespace trainrt
