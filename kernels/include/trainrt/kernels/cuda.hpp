#pragma once
// CUDA kernels with the contracts of their CPU twins (kernels/cpu.hpp). Pointers are device
// pointers; tensor lists are host arrays of device pointers. Everything is enqueued on `stream`
// (a cudaStream_t; nullptr = the default stream). Multi-tensor kernels take up to 24 tensors and
// 320 chunks per launch, so thousands of small tensors cost a handful of launches.
// Built only with TRAINRT_WITH_CUDA; otherwise every call throws trainrt::Error.
#include <cstddef>
#include <cstdint>

#include "trainrt/dtype.hpp"
#include "trainrt/kernels/tensor_list.hpp"

namespace trainrt::kernels::cuda {

using Stream = void*;

bool device_available();  // built with CUDA and at least one device visible

void pack(const ConstTensorRef* tensors, std::size_t n, DType dtype, void* bucket, Stream stream = nullptr);
void unpack(const void* bucket, const TensorRef* tensors, std::size_t n, DType dtype, Stream stream = nullptr);

// `flag` (device int) is set to 1 when any input/output is inf/NaN; it is never cleared here.
void cast_to_half(const float* in, std::uint16_t* out, std::size_t count, float scale, HalfKind kind, int* flag,
                  Stream stream = nullptr);
void cast_from_half(const std::uint16_t* in, float* out, std::size_t count, float scale, HalfKind kind, int* flag,
                    Stream stream = nullptr);

// Writes the norm to `result` (device double). Bitwise equal to cpu::l2_norm.
void l2_norm(const ConstTensorRef* tensors, std::size_t n, DType dtype, double* result, Stream stream = nullptr);

// `found_inf`: device int or nullptr; when it holds non-zero the update is skipped on the device.
void adamw_f32(const TensorRef* params, const ConstTensorRef* grads, const TensorRef* m, const TensorRef* v,
               std::size_t n, const AdamWConfig& config, const int* found_inf, Stream stream = nullptr);
void adamw_bf16_master(const TensorRef* params_bf16, const ConstTensorRef* grads_bf16, const TensorRef* master,
                       const TensorRef* m, const TensorRef* v, std::size_t n, const AdamWConfig& config,
                       const int* found_inf, Stream stream = nullptr);

// One digest per 64 KiB block into `digests` (device, max(1, ceil(bytes / 64 KiB)) entries),
// equal to cpu::block_digests; combine on the host with cpu::combine_digests.
void block_digests(const void* data, std::size_t bytes, std::uint64_t* digests, Stream stream = nullptr);

}  // namespace trainrt::kernels::cuda
