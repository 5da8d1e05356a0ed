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

// A stream and an event of our own per copy: copies are rare (one per registered buffer per
// save or restore), so creating them costs nothing that matters and no state outlives a call.
class CopyStream {
 public:
  CopyStream() {
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    if (cudaError_t rc = cudaEventCreateWithFlags(&after_, cudaEventDisableTiming); rc != cudaSuccess) {
      cudaStreamDestroy(stream_);
      check(rc, "cudaEventCreate");
    }
  }
  ~CopyStream() {
    cudaEventDestroy(after_);
    cudaStreamDestroy(stream_);
  }
  CopyStream(const CopyStream&) = delete;
  CopyStream& operator=(const CopyStream&) = delete;

  // Orders this stream after the user's stream, or after the whole device without one.
  void after(void* user) {
    if (!user) {
      check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      return;
    }
    check(cudaEventRecord(after_, static_cast<cudaStream_t>(user)), "cudaEventRecord(user stream)");
    check(cudaStreamWaitEvent(stream_, after_, 0), "cudaStreamWaitEvent");
  }
  void copy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind, const char* what) {
    check(cudaMemcpyAsync(dst, src, bytes, kind, stream_), what);
    check(cudaStreamSynchronize(stream_), what);
  }

 private:
  cudaStream_t stream_{};
  cudaEvent_t after_{};
};

// The device that holds `p` is current for the copy, the previous one again afterwards: the copy
// stream, the event and a device-wide wait must belong to the buffer's device, not to whichever
// device the calling thread last used (a process driving several GPUs would otherwise wait on the
// wrong one and stage a buffer still being written).
class OnDeviceOf {
 public:
  explicit OnDeviceOf(const void* p) {
    cudaPointerAttributes a{};
    check(cudaPointerGetAttributes(&a, p), "cudaPointerGetAttributes");
    check(cudaGetDevice(&previous_), "cudaGetDevice");
    if ((a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged) && a.device >= 0 && a.device != previous_)
      check(cudaSetDevice(a.device), "cudaSetDevice");
  }
  ~OnDeviceOf() {
    int now = -1;
    if (cudaGetDevice(&now) == cudaSuccess && now != previous_) cudaSetDevice(previous_);
  }
  OnDeviceOf(const OnDeviceOf&) = delete;
  OnDeviceOf& operator=(const OnDeviceOf&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace

void* pinned_alloc(std::size_t bytes) {
  void* p = nullptr;
  check(cudaMallocHost(&p, bytes ? bytes : 1), "cudaMallocHost");
  return p;
}
void pinned_free(void* p) noexcept {
  if (p) cudaFreeHost(p);
}
void copy_device_to_host(void* host, const void* device, std::size_t bytes, void* stream) {
  OnDeviceOf on(device);
  CopyStream s;
  s.after(stream);
  s.copy(host, device, bytes, cudaMemcpyDeviceToHost, "cudaMemcpyAsync device->host");
}
void copy_host_to_device(void* device, const void* host, std::size_t bytes, void* stream) {
  OnDeviceOf on(device);
  CopyStream s;
  s.after(stream);  // the user's last reads of the old contents come first
  s.copy(device, host, bytes, cudaMemcpyHostToDevice, "cudaMemcpyAsync host->device");
}
#else
void* pinned_alloc(std::size_t) { throw Error("device buffers need a CUDA build", "checkpoint"); }
void pinned_free(void*) noexcept {}
void copy_device_to_host(void*, const void*, std::size_t, void*) {
  throw Error("device buffers need a CUDA build", "checkpoint");
}
void copy_host_to_device(void*, const void*, std::size_t, void*) {
  throw Error("device buffers need a CUDA build", "checkpoint");
}
#endif

}  // namespace trainrt::checkpoint
