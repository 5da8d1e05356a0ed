#pragma once
// CPU implementations with the same contracts as the CUDA kernels (kernels/cuda.hpp): for equal
// inputs their results are bitwise equal to the GPU's (element_ops.hpp fixes the operation order,
// docs/kernels.md proves it). They are also the code path the runtime uses for host memory.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "trainrt/dtype.hpp"
#include "trainrt/kernels/tensor_list.hpp"

namespace trainrt::kernels::cpu {

// Concatenates the tensors (any alignment; elements of `dtype`) into `bucket`, in list order.
void pack(const ConstTensorRef* tensors, std::size_t n, DType dtype, void* bucket);
// The inverse of pack.
void unpack(const void* bucket, const TensorRef* tensors, std::size_t n, DType dtype);

// out = round_to_nearest_even(in * scale); returns true when any input or output is inf/NaN.
bool cast_to_half(const float* in, std::uint16_t* out, std::size_t count, float scale, HalfKind kind);
// out = f32(in) * scale; returns true when any output is inf/NaN.
bool cast_from_half(const std::uint16_t* in, float* out, std::size_t count, float scale, HalfKind kind);

// sqrt(sum of squares) over every element of every tensor (f32, f16 or bf16). Deterministic: the
// fixed reduction order of element_ops.hpp (a function of the tensor sizes only); bitwise identical
// run to run and to the GPU kernel.
double l2_norm(const ConstTensorRef* tensors, std::size_t n, DType dtype);

// Fused AdamW on fp32 params/grads/moments. Skips everything when `found_inf` is non-null and set.
void adamw_f32(const TensorRef* params, const ConstTensorRef* grads, const TensorRef* m, const TensorRef* v,
               std::size_t n, const AdamWConfig& config, const int* found_inf = nullptr);
// bf16 params and grads with fp32 master weights: the master is updated, params = bf16(master).
void adamw_bf16_master(const TensorRef* params_bf16, const ConstTensorRef* grads_bf16, const TensorRef* master,
                       const TensorRef* m, const TensorRef* v, std::size_t n, const AdamWConfig& config,
                       const int* found_inf = nullptr);

// trainrt-block64 v2: one 64-bit digest per 64 KiB block (the last block may be shorter).
std::vector<std::uint64_t> block_digests(const void* data, std::size_t bytes);
// The whole buffer: XXH3-64 of the block digests (libxxhash), identical for device buffers whose
// digests come from the GPU kernel.
std::uint64_t checksum(const void* data, std::size_t bytes);
std::uint64_t combine_digests(const std::vector<std::uint64_t>& digests);

}  // namespace trainrt::kernels::cpu
