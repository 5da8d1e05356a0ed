#pragma once
// Gradient bucketing: many gradient tensors are packed into a few flat buckets (kernels' pack,
// the CUDA kernel for device memory, its CPU twin for host memory), each bucket is allreduced as
// one collective, and the results are unpacked back in place.
//
// Device memory is stream-ordered (nccl_communicator.hpp): pack, allreduce and unpack run on
// `stream`, after the work already enqueued there (the gradients' producers), and the stream's
// later work (the optimizer) orders after the unpack. Producers on other streams must be ordered
// before `stream` by the caller. allreduce() returns once the collectives are done and throws
// their error (PeerError, UsageError) like every blocking call.
#include <cstddef>
#include <vector>

#include "trainrt/kernels/tensor_list.hpp"
#include "trainrt/memory.hpp"
#include "trainrt/runtime/communicator.hpp"

namespace trainrt {

class GradientBucketer {
 public:
  // `grads` stay owned by the caller and must outlive the bucketer. Tensors are assigned to buckets
  // in order, a new bucket starting when `bucket_bytes` would be exceeded (one large tensor may
  // make a bucket of its own).
  // Device memory needs an NCCL `comm`; `stream` (a cudaStream_t, nullptr = the communicator's
  // caller stream) is where the gradients are produced and consumed.
  GradientBucketer(Communicator& comm, std::vector<kernels::TensorRef> grads, DType dtype, std::size_t bucket_bytes,
                   Memory memory = Memory::Host, void* stream = nullptr);
  ~GradientBucketer();
  GradientBucketer(const GradientBucketer&) = delete;
  GradientBucketer& operator=(const GradientBucketer&) = delete;

  // Allreduces every gradient (avg by default), bucket by bucket, overlapping the packing of
  // bucket k+1 with the collective of bucket k on host memory.
  void allreduce(ReduceOp op = ReduceOp::Avg);
  std::size_t bucket_count() const { return buckets_.size(); }

 private:
  struct Bucket {
    std::size_t first = 0, count = 0, elements = 0;
    void* flat = nullptr;
  };
  Communicator& comm_;
  std::vector<kernels::TensorRef> grads_;
  DType dtype_;
  Memory memory_;
  void* stream_ = nullptr;
  std::vector<Bucket> buckets_;
};

}  // namespace trainrt
