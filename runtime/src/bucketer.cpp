#include "trainrt/runtime/bucketer.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <exception>
#include <vector>

#include "trainrt/error.hpp"
#include "trainrt/kernels/cpu.hpp"
#include "trainrt/kernels/cuda.hpp"
#include "trainrt/runtime/nccl_communicator.hpp"

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

// The communicator's caller stream set to the bucketer's for one allreduce(), then restored: the
// collectives then order after the packs and before the unpacks on that one stream.
class CallerStream {
 public:
  CallerStream(Communicator& comm, void* stream) : comm_(comm), saved_(nccl_stream(comm)) {
    if (stream) set_nccl_stream(comm, stream);
  }
  ~CallerStream() {
    try {
      set_nccl_stream(comm_, saved_);
    } catch (...) {
    }
  }
  void* stream() { return nccl_stream(comm_); }

 private:
  Communicator& comm_;
  void* saved_;
};

GradientBucketer::GradientBucketer(Communicator& comm, std::vector<kernels::TensorRef> grads, DType dtype,
                                   std::size_t bucket_bytes, Memory memory, void* stream)
    : comm_(comm), grads_(std::move(grads)), dtype_(dtype), memory_(memory), stream_(stream) {
  if (bucket_bytes == 0) throw UsageError("bucket size must be positive", "bucketer");
  const std::size_t es = size_of(dtype);
  if (es == 0) throw UsageError("unknown dtype", "bucketer");
  if (memory == Memory::Device) (void)nccl_stream(comm);  // UsageError unless comm is NCCL's
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
    // Everything on one stream: pack k, allreduce k (ordered after pack k by the communicator's
    // event), unpack k (ordered after allreduce k); the host waits only at the end.
    CallerStream scope(comm_, stream_);
    void* stream = scope.stream();
    std::vector<Work> pending;
    pending.reserve(buckets_.size());
    for (const auto& b : buckets_) {
      auto src = sources(b);
      kernels::cuda::pack(src.data(), src.size(), dtype_, b.flat, stream);
      pending.push_back(comm_.allreduce_async(b.flat, b.flat, b.elements, dtype_, op));
      kernels::cuda::unpack(b.flat, grads_.data() + b.first, b.count, dtype_, stream);
    }
    for (auto& w : pending) w.wait();  // throws the first failure (the communicator aborted)
    return;
  }
  // Host: bucket k's collective runs on the progress thread while bucket k+1 is packed here.
  std::vector<Work> pending;
  pending.reserve(buckets_.size());
  for (const auto& b : buckets_) {
    auto src = sources(b);
    kernels::cpu::pack(src.data(), src.size(), dtype_, b.flat);
    pending.push_back(comm_.allreduce_async(b.flat, b.flat, b.elements, dtype_, op));
  }
  // Every collective is waited for before an error leaves: none may still write a bucket after.
  std::exception_ptr first;
  for (std::size_t k = 0; k < buckets_.size(); ++k) {
    try {
      pending[k].wait();
      if (!first)
        kernels::cpu::unpack(buckets_[k].flat, grads_.data() + buckets_[k].first, buckets_[k].count, dtype_);
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace trainrt
