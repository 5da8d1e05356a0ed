// Compiled in every build, with or without CUDA: the check is host code, and the unit tests reach
// it on machines without a GPU.
#include "trainrt/kernels/alignment.hpp"

#include <cstdint>
#include <cstdio>
#include <string>

#include "trainrt/error.hpp"

namespace trainrt::kernels {
namespace {

[[noreturn]] void misaligned(const std::string& argument, const void* p, std::size_t align, const char* function) {
  char addr[2 + 16 + 1];
  std::snprintf(addr, sizeof addr, "%#llx", static_cast<unsigned long long>(reinterpret_cast<std::uintptr_t>(p)));
  throw UsageError(argument + " (" + addr + ") is not " + std::to_string(align) +
                       "-byte aligned: the kernel loads its elements whole, and a misaligned load faults the device",
                   function);
}

template <typename Ref>
void require_list(const Ref* tensors, std::size_t n, std::size_t align, const char* function, const char* argument) {
  for (std::size_t i = 0; i < n; ++i) {
    if (tensors[i].count == 0) continue;
    if (reinterpret_cast<std::uintptr_t>(tensors[i].data) % align != 0)
      misaligned(std::string(argument) + "[" + std::to_string(i) + "].data", tensors[i].data, align, function);
  }
}

}  // namespace

void require_aligned(const void* p, std::size_t align, const char* function, const char* argument) {
  if (reinterpret_cast<std::uintptr_t>(p) % align != 0) misaligned(argument, p, align, function);
}

void require_aligned(const TensorRef* tensors, std::size_t n, std::size_t align, const char* function,
                     const char* argument) {
  require_list(tensors, n, align, function, argument);
}

void require_aligned(const ConstTensorRef* tensors, std::size_t n, std::size_t align, const char* function,
                     const char* argument) {
  require_list(tensors, n, align, function, argument);
}

}  // namespace trainrt::kernels
