#pragma once
// The one rule every GPU test program follows: it is SKIPPED (exit 77) only when the machine has no
// GPU — no CUDA driver at all, or a driver that finds no device. Any other CUDA error at start
// (a driver too old for the runtime, a device that fails to initialise) is a FAILURE: a GPU machine
// must never report its GPU tests as skipped.
#include <cuda_runtime.h>

#include <cstdio>

namespace trainrt::testing {

// -1 when a usable device is there (go on); otherwise the exit code to return, with the reason
// printed: 77 and "SKIPPED: ..." without a GPU, 1 and "FAIL: ..." for a broken CUDA installation.
// `what` names what was compiled but not run ("the GPU kernels").
inline int gpu_presence_exit_code(const char* what) {
  int count = 0;
  const cudaError_t rc = cudaGetDeviceCount(&count);
  int driver = -1;
  const cudaError_t drc = cudaDriverGetVersion(&driver);
  if (rc == cudaErrorNoDevice || (rc == cudaSuccess && count == 0)) {
    std::printf("SKIPPED: no CUDA device on this machine (%s); %s: compiled, not run\n",
                rc == cudaSuccess ? "device count 0" : "cudaErrorNoDevice", what);
    return 77;
  }
  if (rc == cudaErrorInsufficientDriver && drc == cudaSuccess && driver == 0) {
    std::printf("SKIPPED: no CUDA driver installed on this machine (no GPU); %s: compiled, not run\n", what);
    return 77;
  }
  if (rc != cudaSuccess) {
    std::printf("FAIL: cudaGetDeviceCount: %s (%s); driver version %d. This is a broken CUDA installation, "
                "not a missing GPU.\n", cudaGetErrorName(rc), cudaGetErrorString(rc), driver);
    return 1;
  }
  std::fflush(stdout);
  return -1;
}

}  // namespace trainrt::testing
