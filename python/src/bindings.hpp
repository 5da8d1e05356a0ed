#pragma once
// The parts of the module, each adding its classes and functions to `m`.
#include <nanobind/nanobind.h>

#include <string>

#include "trainrt/error.hpp"

namespace trainrt::py {

// A trainrt::Error from the checkpoint layer: raised in Python as trainrt.CheckpointError. The C++
// runtime throws plain trainrt::Error there; the binding marks it so Python code can tell a bad
// checkpoint from a failed collective without parsing messages.
class CheckpointError : public Error {
 public:
  using Error::Error;
};

// Runs `f`, turning the runtime's plain trainrt::Error into CheckpointError; PeerError and
// UsageError keep their kinds.
template <typename F>
auto checkpoint_call(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const PeerError&) {
    throw;
  } catch (const UsageError&) {
    throw;
  } catch (const CheckpointError&) {
    throw;
  } catch (const Error& e) {
    throw CheckpointError(e.what());
  }
}

#ifdef TRAINRT_PY_HAVE_CUDA
inline constexpr bool kHaveCuda = true;  // built with the CUDA part: device tensors can be registered
#else
inline constexpr bool kHaveCuda = false;
#endif

void bind_world(nanobind::module_& m);
void bind_checkpoint(nanobind::module_& m);
void bind_step_io(nanobind::module_& m);

}  // namespace trainrt::py
