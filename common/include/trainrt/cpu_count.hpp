#pragma once
// The CPUs this process may run on (its affinity mask: a Slurm step's binding, taskset), which
// is what parallel work and spin-or-sleep choices must count, not the machine's cores. 0 when
// the mask cannot be read: each caller picks its own fallback.
#include <sched.h>

#include <cerrno>
#include <cstddef>
#include <memory>

namespace trainrt {

inline unsigned affinity_cpu_count() noexcept {
  // A fixed cpu_set_t holds 1,024 CPUs; the kernel refuses it (EINVAL) on a machine with more, so
  // the set grows until it fits (to 65,536 CPUs).
  for (int n = 1024; n <= 65536; n *= 2) {
    std::unique_ptr<cpu_set_t, decltype([](cpu_set_t* s) { CPU_FREE(s); })> set(CPU_ALLOC(n));
    if (!set) return 0;
    const std::size_t bytes = CPU_ALLOC_SIZE(n);
    CPU_ZERO_S(bytes, set.get());
    if (sched_getaffinity(0, bytes, set.get()) == 0) return static_cast<unsigned>(CPU_COUNT_S(bytes, set.get()));
    if (errno != EINVAL) return 0;
  }
  return 0;
}

}  // namespace trainrt
