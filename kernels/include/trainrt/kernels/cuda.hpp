#pragma once
// CUDA kernels with the contracts of their CPU twins (kernels/cpu.hpp): for equal inputs the
// results are bitwise equal (docs/kernels.md). Pointers are device pointers; tensor lists are host
// arrays of device pointers.
//
// Streams: every function enqueues all of its work (kernels, scratch allocation, the upload of a
// tensor table) on `stream`, a cudaStream_t, and returns without waiting for the device. There is no
// default argument, so every call site names its stream; nullptr means the legacy default stream,
// which the runtime never passes in new code (it serialises with every blocking stream).
//
// Launch shape: a grid sized from the device's SM count (queried once per device), 256 threads a
// block, 16-byte vector accesses with scalar heads and tails. A multi-tensor call is one launch
// (pack/unpack, AdamW) or exactly one launch (l2_norm) whatever the number of tensors; only the
// split of the work between blocks depends on the SM count, never the results.
//
// Errors: a failing CUDA call throws trainrt::Error naming the call and the CUDA error. A pointer
// without the alignment a function names below throws trainrt::UsageError naming the argument,
// before anything is enqueued (kernels/alignment.hpp).
// Built only with CUDA; otherwise every call throws trainrt::Error (device_available: false).
#include <cstddef>
#include <cstdint>

#include "trainrt/dtype.hpp"
#include "trainrt/kernels/tensor_list.hpp"

namespace trainrt::kernels::cuda {

using Stream = void*;  // a cudaStream_t

// True when at least one CUDA device is visible. False when there is none (cudaErrorNoDevice, a
// count of 0) or no CUDA driver is installed at all (the driver reports version 0), and in a build
// without CUDA. Any other CUDA error, e.g. a driver older than the runtime, throws trainrt::Error.
bool device_available();

// Concatenate / split: any alignment, any size; element pointers need no alignment at all.
void pack(const ConstTensorRef* tensors, std::size_t n, DType dtype, void* bucket, Stream stream);
void unpack(const void* bucket, const TensorRef* tensors, std::size_t n, DType dtype, Stream stream);

// `flag` (device int) is set to 1 when any input/output is inf/NaN; it is never cleared here.
// f32 pointers must be 4-byte aligned, half pointers 2-byte aligned (natural alignment), `flag` 4.
void cast_to_half(const float* in, std::uint16_t* out, std::size_t count, float scale, HalfKind kind, int* flag,
                  Stream stream);
void cast_from_half(const std::uint16_t* in, float* out, std::size_t count, float scale, HalfKind kind, int* flag,
                    Stream stream);

// Writes the norm to `result` (device double). Bitwise equal to cpu::l2_norm. Exactly one kernel
// launch per call; scratch comes from a stream-ordered pool and is released in stream order.
// Natural alignment required (f32: 4 bytes, f16/bf16: 2 bytes; `result` 8): elements are loaded whole.
void l2_norm(const ConstTensorRef* tensors, std::size_t n, DType dtype, double* result, Stream stream);

// `found_inf`: device int or nullptr; when it holds non-zero the update is skipped on the device.
// Natural alignment required (f32: 4 bytes, bf16: 2 bytes, `found_inf` 4); 16-byte alignment makes
// it vectorised.
void adamw_f32(const TensorRef* params, const ConstTensorRef* grads, const TensorRef* m, const TensorRef* v,
               std::size_t n, const AdamWConfig& config, const int* found_inf, Stream stream);
void adamw_bf16_master(const TensorRef* params_bf16, const ConstTensorRef* grads_bf16, const TensorRef* master,
                       const TensorRef* m, const TensorRef* v, std::size_t n, const AdamWConfig& config,
                       const int* found_inf, Stream stream);

// For benchmarks (kernels-bench): while set on this thread, each function above records `before`
// on its stream right before its kernel launch and `after` right after it (two cudaEvent_t made
// with timing), so a kernel's own time can be read apart from the work its call does around it
// (the upload of a tensor table, scratch from the pool). Each call with work launches exactly one
// kernel; one without (zero elements) records nothing. nullptr, nullptr: off, the default.
void set_launch_events(void* before, void* after);

// One digest per 64 KiB block into `digests` (device, max(1, ceil(bytes / 64 KiB)) entries),
// equal to cpu::block_digests; combine on the host with cpu::combine_digests. `data`: any
// alignment; `digests`: 8-byte aligned.
void block_digests(const void* data, std::size_t bytes, std::uint64_t* digests, Stream stream);

}  // namespace trainrt::kernels::cuda
