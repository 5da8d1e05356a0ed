// Device buffers through a checkpoint: save from GPU memory, clobber it, restore, compare.
// Exits 77 (CTest: skipped) with a message when no CUDA device is present.
#include <cuda_runtime.h>
#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <vector>

#include "trainrt/checkpoint/manager.hpp"

using namespace trainrt;

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    fmt::print("SKIPPED: no CUDA device on this machine; device checkpoints were compiled but not run\n");
    return 77;
  }
  const std::size_t n = 1 << 22;
  std::vector<float> host(n), back(n);
  for (std::size_t i = 0; i < n; ++i) host[i] = static_cast<float>(i % 4099) * 0.5f;
  float* dev = nullptr;
  cudaMalloc(&dev, n * 4);
  cudaMemcpy(dev, host.data(), n * 4, cudaMemcpyHostToDevice);
  auto dir = std::filesystem::temp_directory_path() / fmt::format("trainrt-devckpt-{}", ::getpid());
  auto session = bootstrap::Session::single_process();
  checkpoint::Options o;
  o.directory = dir.string();
  {
    checkpoint::Manager m(*session, o);
    m.register_buffer("dev", dev, n * 4, DType::F32, {static_cast<std::int64_t>(n)}, checkpoint::Sharding::PerRank,
                      checkpoint::Location::Device);
    auto r = m.save(7).get();
    fmt::print("saved step {} from device memory: stall {:.4f} s\n", r.step, r.stall_seconds);
    cudaMemset(dev, 0, n * 4);
    if (m.restore() != 7) return fmt::print("FAIL: restore did not return step 7\n"), 1;
  }
  cudaMemcpy(back.data(), dev, n * 4, cudaMemcpyDeviceToHost);
  std::filesystem::remove_all(dir);
  cudaFree(dev);
  bool same = back == host;
  fmt::print("device checkpoint round trip: {} passed, {} failed\n", same ? 1 : 0, same ? 0 : 1);
  return same ? 0 : 1;
}
