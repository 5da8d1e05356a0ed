#pragma once
// The one rule every GPU test and benchmark program follows: it is skipped (exit 77) only when the
// machine has no GPU — no CUDA driver at all, or a driver that finds no device. Any other CUDA
// error at start (a driver too old for the runtime, a device that fails to initialise) is a
// FAILURE: a GPU machine must never report its GPU work as skipped.
#include <cuda_runtime.h>

#include <cstdio>
#include <string>

namespace trainrt::testing {

struct GpuPresence {
  enum class State { present, absent, broken } state = State::present;
  std::string why;  // absent: why there is no GPU; broken: the CUDA error
};

inline GpuPresence probe_gpu() {
  int count = 0, driver = -1;
  const cudaError_t rc = cudaGetDeviceCount(&count);
  const cudaError_t drc = cudaDriverGetVersion(&driver);
  using S = GpuPresence::State;
  if (rc == cudaErrorNoDevice) return {S::absent, "cudaErrorNoDevice"};
  if (rc == cudaSuccess && count == 0) return {S::absent, "device count 0"};
  if (rc == cudaErrorInsufficientDriver && drc == cudaSuccess && driver == 0)
    return {S::absent, "no CUDA driver installed on this machine"};
  if (rc != cudaSuccess)
    return {S::broken, std::string("cudaGetDeviceCount: ") + cudaGetErrorName(rc) + " (" + cudaGetErrorString(rc) +
                           "); driver version " + std::to_string(driver) +
                           ". This is a broken CUDA installation, not a missing GPU"};
  return {};
}

// For a test program: -1 when a usable device is there (go on); otherwise the exit code to return,
// with the reason printed: 77 and "SKIPPED: ..." without a GPU, 1 and "FAIL: ..." for a broken
// CUDA. `what` names what was compiled but not run ("the GPU kernels").
inline int gpu_presence_exit_code(const char* what) {
  const GpuPresence p = probe_gpu();
  if (p.state == GpuPresence::State::absent)
    std::printf("SKIPPED: no GPU on this machine (%s); %s: compiled, not run\n", p.why.c_str(), what);
  else if (p.state == GpuPresence::State::broken)
    std::printf("FAIL: %s\n", p.why.c_str());
  std::fflush(stdout);
  return p.state == GpuPresence::State::absent ? 77 : p.state == GpuPresence::State::broken ? 1 : -1;
}

// For a benchmark: the same, with the lines benchmarks print ("# no CUDA device: WHY; WHAT not
// measured", which gpu-check and the smoke tests look for).
inline int bench_gpu_presence_exit_code(const char* what) {
  const GpuPresence p = probe_gpu();
  if (p.state == GpuPresence::State::absent)
    std::printf("# no CUDA device: %s; %s not measured\n", p.why.c_str(), what);
  else if (p.state == GpuPresence::State::broken)
    std::printf("FAIL: %s\n", p.why.c_str());
  std::fflush(stdout);
  return p.state == GpuPresence::State::absent ? 77 : p.state == GpuPresence::State::broken ? 1 : -1;
}

}  // namespace trainrt::testing
