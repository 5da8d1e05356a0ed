#include "device_copy.hpp"

#include <fmt/format.h>

#include "trainrt/error.hpp"

#ifdef TRAINRT_HAVE_CUDA_KERNELS
#include <cuda_runtime.h>
#endif

namespace trainrt::checkpoint {

#ifdef TRAINRT_HAVE_CUDA_KERNELS
namespace {
void check(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) throw Error(fmt::format("{}: {}", what, cudaGetErrorString(rc)), "checkpoint");
}
}  // namespace

void* pinned_alloc(std::size_t bytes) {
  void* p = nullptr;
  check(cudaMallocHost(&p, bytes ? bytes : 1), "cudaMallocHost");
  return p;
}
void pinned_free(void* p) noexcept {
  if (p) cudaFreeHost(p);
}
void copy_device_to_host(void* host, const void* device, std::size_t bytes) {
  check(cudaMemcpy(host, device, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy device->host");
}
void copy_host_to_device(void* device, const void* host, std::size_t bytes) {
  check(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy host->device");
}
#else
void* pinned_alloc(std::size_t) { throw Error("device buffers need a CUDA build", "checkpoint"); }
void pinned_free(void*) noexcept {}
void copy_device_to_host(void*, const void*, std::size_t) { throw Error("device buffers need a CUDA build", "checkpoint"); }
void copy_host_to_device(void*, const void*, std::size_t) { throw Error("device buffers need a CUDA build", "checkpoint"); }
#endif

}  // namespace trainrt::checkpoint
