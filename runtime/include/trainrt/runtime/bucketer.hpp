#pragma once
// Gradient bucketing: many gradient tensors are packed into a few flat buckets (kernels' pack,
// the CUDA kernel for device memory, its CPU twin for host memory), each bucket is allreduced as
// one collective, and the results are unpacked back in place.
#include <cstddef>
#include <vector>

#include "trainrt/kernels/tensor_list.hpp"
#include "trainrt/runtime/communicator.hpp"

namespace trainrt {

enum class Memory { Host, Device };

class GradientBucketer {
 public:
  // `grads` stay owned by the caller and must outlive the bucketer. Tensors are assigned to buckets
  // in order, a new bucket starting when `bucket_bytes` would be exceeded (one large tensor may
  // make a bucket of its own).
  GradientBucketer(Communicator& comm, std::vector<kernels::TensorRef> grads, DType dtype, std::size_t bucket_bytes,
                   Memory memory = Memory::Host);
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
  std::vector<Bucket> buckets_;
};

}  // namespace trainrt
