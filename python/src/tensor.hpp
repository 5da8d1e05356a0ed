#pragma once
// A tensor or array from Python seen as one contiguous block of memory, without a copy: torch
// tensors (CPU and CUDA) and anything else with __dlpack__, numpy arrays through the buffer
// protocol. What the runtime cannot use (strided views, read-only arrays, other devices) is a
// trainrt::UsageError naming the object, never a silent copy: in-place results must land in the
// caller's memory.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trainrt/dtype.hpp"

namespace trainrt::py {

namespace nb = nanobind;
using Array = nb::ndarray<>;  // any dtype, device and layout; view() checks

struct View {
  Array array;                      // holds the producer's memory alive while the view lives
  void* data = nullptr;
  std::size_t bytes = 0;
  std::size_t count = 0;            // elements
  std::optional<DType> dtype;       // empty: a type the runtime has no DType for (uint8, bool, ...)
  std::string dtype_name;           // "float32", "uint8", ...
  std::vector<std::int64_t> shape;
  bool on_cuda = false;
  int device_id = 0;
};

// `what` names the object in error messages ("tensor 'layer.weight'", "allreduce's tensor").
View view(nb::handle obj, const std::string& what);

// "float32", "bfloat16", "int64", "uint8", "bool", ... for messages and entry dtypes.
std::string dtype_name(nb::dlpack::dtype t);

}  // namespace trainrt::py
