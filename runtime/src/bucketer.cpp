#include "trainrt/runtime/bucketer.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <vector>

#include "trainrt/error.hpp"
#include "trainrt/kernels/cpu.hpp"
#include "trainrt/kernels/cuda.hpp"

#ifdef TRAINRT_HAVE_CUDA_KERNELS
#include <cuda_runtime.h>
#endif

namespace trainrt {
namespace {

void* allocate(std::size_t bytes, Memory memory) {
  if (memory == Memory::Host) {
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64 + 64);
    if (!p) throw Error(fmt::format("cannot allocate a {}-byte bucket", bytes), "bucketer");
    return p;
  }
#ifdef TRAINRT_HAVE_CUDA_KERNELS
  void* p = nullptr;
  if (cudaMalloc(&p, bytes + 64) != cudaSuccess) throw Error(fmt::format("cudaMalloc of {} bytes failed", bytes), "bucketer");
  return p;
#else
  throw Error("device buckets need a CUDA build", "bucketer");
#endif
}

void release(void* p, Memory memory) {
  if (!p) return;
  if (memory == Memory::Host) {
    std::free(p);
    return;
  }
#ifdef TRAINRT_HAVE_CUDA_KERNELS
  cudaFree(p);
#endif
}

}  // namespace

GradientBucketer::GradientBucketer(Communicator& comm, std::vector<kernels::TensorRef> grads, DType dtype,
                                   std::size_t bucket_bytes, Memory memory)
    : comm_(comm), grads_(std::move(grads)), dtype_(dtype), memory_(memory) {
  if (bucket_bytes == 0) throw Error("bucket size must be positive", "bucketer");
  const std::size_t es = size_of(dtype);
  Bucket b;
  for (std::size_t i = 0; i < grads_.size(); ++i) {
    const std::size_t bytes = grads_[i].count * es;
    if (b.count > 0 && (b.elements * es + bytes) > bucket_bytes) {
      buckets_.push_back(b);
      b = Bucket{i, 0, 0, nullptr};
    }
    if (b.count == 0) b.first = i;
    ++b.count;
    b.elements += grads_[i].count;
  }
  if (b.count > 0) buckets_.push_back(b);
  try {
    for (auto& bucket : buckets_) bucket.flat = allocate(bucket.elements * es, memory_);
  } catch (...) {
    for (auto& bucket : buckets_) release(bucket.flat, memory_);
    throw;
  }
}

GradientBucketer::~GradientBucketer() {
  for (auto& b : buckets_) release(b.flat, memory_);
}

void GradientBucketer::allreduce(ReduceOp op) {
  auto sources = [this](const Bucket& b) {
    std::vector<kernels::ConstTensorRef> src;
    for (std::size_t t = 0; t < b.count; ++t) src.push_back({grads_[b.first + t].data, grads_[b.first + t].count});
    return src;
  };
  if (memory_ == Memory::Device) {
    for (const auto& b : buckets_) {
      auto src = sources(b);
      kernels::cuda::pack(src.data(), src.size(), dtype_, b.flat);
      comm_.allreduce(b.flat, b.flat, b.elements, dtype_, op).wait();
      kernels::cuda::unpack(b.flat, grads_.data() + b.first, b.count, dtype_);
    }
    return;
  }
  // Host: bucket k's collective runs on the progress thread while bucket k+1 is packed here.
  std::vector<Work> pending(buckets_.size());
  for (std::size_t k = 0; k < buckets_.size(); ++k) {
    const Bucket& b = buckets_[k];
    auto src = sources(b);
    kernels::cpu::pack(src.data(), src.size(), dtype_, b.flat);
    pending[k] = comm_.allreduce(b.flat, b.flat, b.elements, dtype_, op, Mode::Async);
  }
  for (std::size_t k = 0; k < buckets_.size(); ++k) {
    pending[k].wait();
    kernels::cpu::unpack(buckets_[k].flat, grads_.data() + buckets_[k].first, buckets_[k].count, dtype_);
  }
}

}  // namespace trainrt
