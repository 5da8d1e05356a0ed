// Device buffers through a checkpoint: save from GPU memory, clobber it, restore, compare.
// SKIPPED (77) only on a machine without a GPU; any CUDA or checkpoint error is a failure.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <exception>
#include <stdexcept>
#include <vector>

#include "../common/gpu_presence.hpp"
#include "../common/temp_dir.hpp"
#include "trainrt/checkpoint/manager.hpp"

using namespace trainrt;

namespace {

void ck(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) throw std::runtime_error(fmt::format("{}: {}", what, cudaGetErrorString(rc)));
}

struct DeviceFloats {
  float* p = nullptr;
  explicit DeviceFloats(std::size_t n) { ck(cudaMalloc(&p, n * sizeof(float)), "cudaMalloc"); }
  ~DeviceFloats() { cudaFree(p); }
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;
};

int round_trip() {
  const std::size_t n = 1 << 22;
  std::vector<float> host(n), back(n);
  for (std::size_t i = 0; i < n; ++i) host[i] = static_cast<float>(i % 4099) * 0.5f;
  DeviceFloats dev(n);
  ck(cudaMemcpy(dev.p, host.data(), n * 4, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  testing::TempDir dir("trainrt-devckpt-");
  auto session = bootstrap::Session::single_process();
  checkpoint::Options o;
  o.directory = dir / "ckpt";
  {
    checkpoint::Manager m(*session, o);
    m.register_buffer("dev", dev.p, n * 4, DType::F32, {static_cast<std::int64_t>(n)}, checkpoint::Sharding::PerRank,
                      checkpoint::Location::Device);
    auto r = m.save(7).get();
    fmt::print("saved step {} from device memory: stall {:.4f} s\n", r.step, r.stall_seconds);
    ck(cudaMemset(dev.p, 0, n * 4), "cudaMemset");
    ck(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    if (const auto step = m.restore(); step != 7) return fmt::print("FAIL: restore returned step {}, not 7\n", step), 1;
  }
  ck(cudaMemcpy(back.data(), dev.p, n * 4, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
  const bool same = back == host;
  fmt::print("device checkpoint round trip: {} passed, {} failed\n", same ? 1 : 0, same ? 0 : 1);
  return same ? 0 : 1;
}

}  // namespace

int main() {
  if (const int code = testing::gpu_presence_exit_code("device checkpoints"); code >= 0) return code;
  try {
    return round_trip();
  } catch (const std::exception& e) {
    fmt::print("FAIL: {}\n", e.what());
    return 1;
  }
}
