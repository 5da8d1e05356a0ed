#pragma once
// The parts of the module, each adding its classes and functions to `m`.
#include <nanobind/nanobind.h>

#include <string>

#include "trainrt/error.hpp"

namespace trainrt::py {

#ifdef TRAINRT_PY_HAVE_CUDA
inline constexpr bool kHaveCuda = true;  // built with the CUDA part: device tensors can be registered
#else
inline constexpr bool kHaveCuda = false;
#endif

void bind_world(nanobind::module_& m);
void bind_checkpoint(nanobind::module_& m);
void bind_step_io(nanobind::module_& m);

}  // namespace trainrt::py
