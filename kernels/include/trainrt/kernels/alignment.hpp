#pragma once
// The host-side check of the alignment a CUDA kernel needs (cuda.hpp names it per function). A
// misaligned pointer is the caller's bug: found on the host it is a trainrt::UsageError naming the
// function and the argument; found on the device it would be a misaligned-address fault that
// leaves the whole process's CUDA context unusable and names nothing.
#include <cstddef>

#include "trainrt/kernels/tensor_list.hpp"

namespace trainrt::kernels {

// Throws UsageError("<argument> (0x...) is not <align>-byte aligned ...", function) unless p is a
// multiple of align. nullptr passes: optional arguments (found_inf) may be null.
void require_aligned(const void* p, std::size_t align, const char* function, const char* argument);

// The same for every tensor of a list that has elements, naming it "<argument>[i].data". Empty
// tensors pass whatever their pointer: the kernels never touch them.
void require_aligned(const TensorRef* tensors, std::size_t n, std::size_t align, const char* function,
                     const char* argument);
void require_aligned(const ConstTensorRef* tensors, std::size_t n, std::size_t align, const char* function,
                     const char* argument);

}  // namespace trainrt::kernels
