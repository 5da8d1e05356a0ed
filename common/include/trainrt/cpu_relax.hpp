#pragma once
// A spin-wait hint: lets the sibling hardware thread run while this one polls shared memory.
namespace trainrt {

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#else
  asm volatile("" ::: "memory");
#endif
}

}  // namespace trainrt
