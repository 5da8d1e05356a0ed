#pragma once
// The test kit's one CUDA-presence check (beside temp_dir.hpp, in trainrt::testing): every GPU
// test and benchmark program includes it rather than asking CUDA itself.
// The rule they all follow: a program is skipped (exit 77) only when the
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

// -1 when a usable device is there (go on); otherwise the exit code to return, with the reason
// printed: 77 and `absent_line` without a GPU, 1 and "FAIL: ..." for a broken CUDA.
inline int presence_exit_code(const GpuPresence& p, const std::string& absent_line) {
  if (p.state == GpuPresence::State::absent) std::printf("%s\n", absent_line.c_str());
  if (p.state == GpuPresence::State::broken) std::printf("FAIL: %s\n", p.why.c_str());
  std::fflush(stdout);
  return p.state == GpuPresence::State::absent ? 77 : p.state == GpuPresence::State::broken ? 1 : -1;
}

// For a test program. `what` names what was compiled but not run ("the GPU kernels").
inline int gpu_presence_exit_code(const char* what) {
  const GpuPresence p = probe_gpu();
  return presence_exit_code(p, "SKIPPED: no GPU on this machine (" + p.why + "); " + what + ": compiled, not run");
}

// For a benchmark, with the line benchmarks print (gpu-check and the smoke tests look for it).
inline int bench_gpu_presence_exit_code(const char* what) {
  const GpuPresence p = probe_gpu();
  return presence_exit_code(p, "# no CUDA device: " + p.why + "; " + what + " not measured");
}

}  // namespace trainrt::testing
