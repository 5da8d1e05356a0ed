// The CUDA kernels. Arithmetic comes from element_ops.hpp (shared with the CPU twins); this file
// adds only the parallel decomposition, which the contracts fix (lanes, chunks, merge orders).
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <vector>

#include "trainrt/error.hpp"
#include "trainrt/kernels/cuda.hpp"
#include "trainrt/kernels/element_ops.hpp"

namespace trainrt::kernels::cuda {
namespace {

constexpr int kMaxTensors = 24;
constexpr int kMaxBlocks = 320;
constexpr std::size_t kElementChunk = 65536;  // elements per CUDA block in elementwise multi-tensor kernels
constexpr int kThreads = 256;

void check(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) throw Error(fmt::format("{}: {}", what, cudaGetErrorString(rc)), "cuda kernels");
}

cudaStream_t as_stream(Stream s) { return static_cast<cudaStream_t>(s); }

// Kernel arguments for one launch of a multi-tensor kernel: up to kMaxTensors tensors in up to
// NLists parallel lists, and a map from CUDA block to (tensor, chunk).
template <int NLists>
struct MultiTensorArgs {
  void* ptrs[NLists][kMaxTensors];
  std::size_t counts[kMaxTensors];
  std::size_t first_chunk_index[kMaxTensors];  // global chunk number of the tensor's chunk 0
  unsigned char block_tensor[kMaxBlocks];
  int block_chunk[kMaxBlocks];
};

// Splits `n` tensors into launches; `launch(args, blocks)` enqueues one kernel.
template <int NLists, typename Launch>
void multi_tensor_apply(std::size_t n, const std::size_t* counts, void* const* const* lists, std::size_t chunk,
                        Launch launch) {
  MultiTensorArgs<NLists> args{};
  int tensors = 0, blocks = 0;
  std::size_t global_chunk = 0;
  for (std::size_t t = 0; t < n; ++t) {
    if (counts[t] == 0) continue;
    for (int l = 0; l < NLists; ++l) args.ptrs[l][tensors] = lists[l][t];
    args.counts[tensors] = counts[t];
    args.first_chunk_index[tensors] = global_chunk;
    const std::size_t chunks = (counts[t] + chunk - 1) / chunk;
    for (std::size_t c = 0; c < chunks; ++c) {
      args.block_tensor[blocks] = static_cast<unsigned char>(tensors);
      args.block_chunk[blocks] = static_cast<int>(c);
      ++blocks;
      const bool last_chunk = c + 1 == chunks;
      if (blocks == kMaxBlocks || (last_chunk && tensors + 1 == kMaxTensors)) {
        launch(args, blocks);
        blocks = 0;
        if (!last_chunk) {
          // The tensor continues in the next launch as tensor 0.
          for (int l = 0; l < NLists; ++l) args.ptrs[l][0] = lists[l][t];
          args.counts[0] = counts[t];
          args.first_chunk_index[0] = global_chunk;
          tensors = 0;
        } else {
          tensors = -1;
        }
      }
    }
    global_chunk += chunks;
    ++tensors;
  }
  if (blocks > 0) launch(args, blocks);
}

// ---------------------------------------------------------------- copies (pack / unpack)
__global__ void copy_kernel(MultiTensorArgs<2> a) {
  const int t = a.block_tensor[blockIdx.x];
  const std::size_t begin = static_cast<std::size_t>(a.block_chunk[blockIdx.x]) * kElementChunk;
  const std::size_t end = min(begin + kElementChunk, a.counts[t]);  // counts are bytes here
  const auto* src = static_cast<const unsigned char*>(a.ptrs[0][t]);
  auto* dst = static_cast<unsigned char*>(a.ptrs[1][t]);
  const bool aligned = ((reinterpret_cast<std::uintptr_t>(src + begin) | reinterpret_cast<std::uintptr_t>(dst + begin)) & 15) == 0;
  if (aligned) {
    const std::size_t vec_end = begin + (end - begin) / 16 * 16;
    for (std::size_t i = begin + threadIdx.x * 16; i < vec_end; i += blockDim.x * 16)
      *reinterpret_cast<uint4*>(dst + i) = *reinterpret_cast<const uint4*>(src + i);
    for (std::size_t i = vec_end + threadIdx.x; i < end; i += blockDim.x) dst[i] = src[i];
  } else {
    for (std::size_t i = begin + threadIdx.x; i < end; i += blockDim.x) dst[i] = src[i];
  }
}

void copy_lists(const std::vector<const void*>& src, const std::vector<void*>& dst, const std::vector<std::size_t>& bytes,
                Stream stream) {
  std::vector<void*> s(src.size());
  for (std::size_t i = 0; i < src.size(); ++i) s[i] = const_cast<void*>(src[i]);
  void* const* lists[2] = {s.data(), dst.data()};
  multi_tensor_apply<2>(src.size(), bytes.data(), lists, kElementChunk, [&](const MultiTensorArgs<2>& a, int blocks) {
    copy_kernel<<<blocks, kThreads, 0, as_stream(stream)>>>(a);
    check(cudaGetLastError(), "copy_kernel launch");
  });
}

// ---------------------------------------------------------------- casts
__global__ void to_half_kernel(const float* in, std::uint16_t* out, std::size_t n, float scale, bool bf16, int* flag) {
  bool bad = false;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const float x = in[i] * scale;
    const std::uint16_t h = bf16 ? f32_to_bf16(x) : f32_to_f16(x);
    out[i] = h;
    bad |= !isfinite(bf16 ? bf16_to_f32(h) : f16_to_f32(h)) || !isfinite(in[i]);
  }
  if (__syncthreads_or(bad) && threadIdx.x == 0) atomicExch(flag, 1);
}

__global__ void from_half_kernel(const std::uint16_t* in, float* out, std::size_t n, float scale, bool bf16, int* flag) {
  bool bad = false;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const float x = (bf16 ? bf16_to_f32(in[i]) : f16_to_f32(in[i])) * scale;
    out[i] = x;
    bad |= !isfinite(x);
  }
  if (__syncthreads_or(bad) && threadIdx.x == 0) atomicExch(flag, 1);
}

unsigned grid_for(std::size_t n) {
  const std::size_t blocks = (n + kThreads * 4 - 1) / (kThreads * 4);
  return static_cast<unsigned>(std::max<std::size_t>(1, std::min<std::size_t>(blocks, 65535)));
}

// ---------------------------------------------------------------- L2 norm
__global__ void norm_partials_kernel(MultiTensorArgs<1> a, int tag, float* partials) {
  const int t = a.block_tensor[blockIdx.x];
  const std::size_t chunk = static_cast<std::size_t>(a.block_chunk[blockIdx.x]);
  const std::size_t base = chunk * kNormChunk;
  const unsigned l = threadIdx.x;
  float acc = 0.f;
  for (std::size_t j = 0; j < kNormChunk / kLanes; ++j) {
    const std::size_t idx = base + j * kLanes + l;
    if (idx < a.counts[t]) {
      const float x = load_as_f32(a.ptrs[0][t], idx, tag);
      acc = fmaf(x, x, acc);
    }
  }
  __shared__ float lanes[kLanes];
  lanes[l] = acc;
  __syncthreads();
  for (unsigned s = kLanes / 2; s > 0; s /= 2) {
    if (l < s) lanes[l] = lanes[l] + lanes[l + s];
    __syncthreads();
  }
  if (l == 0) partials[a.first_chunk_index[t] + chunk] = lanes[0];
}

__global__ void norm_finish_kernel(const float* partials, std::size_t k, double* result) {
  const unsigned l = threadIdx.x;
  double acc = 0;
  for (std::size_t i = l; i < k; i += kLanes) acc += static_cast<double>(partials[i]);
  __shared__ double lanes[kLanes];
  lanes[l] = acc;
  __syncthreads();
  for (unsigned s = kLanes / 2; s > 0; s /= 2) {
    if (l < s) lanes[l] = lanes[l] + lanes[l + s];
    __syncthreads();
  }
  if (l == 0) *result = sqrt(lanes[0]);
}

// ---------------------------------------------------------------- AdamW
template <bool Bf16Master>
__global__ void adamw_kernel(MultiTensorArgs<5> a, AdamWScalars s, const int* found_inf) {
  if (found_inf && *found_inf) return;
  const int t = a.block_tensor[blockIdx.x];
  const std::size_t begin = static_cast<std::size_t>(a.block_chunk[blockIdx.x]) * kElementChunk;
  const std::size_t end = min(begin + kElementChunk, a.counts[t]);
  float* m = static_cast<float*>(a.ptrs[2][t]);
  float* v = static_cast<float*>(a.ptrs[3][t]);
  for (std::size_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    if constexpr (Bf16Master) {
      auto* p = static_cast<std::uint16_t*>(a.ptrs[0][t]);
      const auto* g = static_cast<const std::uint16_t*>(a.ptrs[1][t]);
      float* w = static_cast<float*>(a.ptrs[4][t]);
      float wi = w[i], mi = m[i], vi = v[i];
      adamw_element(wi, bf16_to_f32(g[i]), mi, vi, s);
      w[i] = wi, m[i] = mi, v[i] = vi;
      p[i] = f32_to_bf16(wi);
    } else {
      float* p = static_cast<float*>(a.ptrs[0][t]);
      const float* g = static_cast<const float*>(a.ptrs[1][t]);
      float pi = p[i], mi = m[i], vi = v[i];
      adamw_element(pi, g[i], mi, vi, s);
      p[i] = pi, m[i] = mi, v[i] = vi;
    }
  }
}

template <bool Bf16Master>
void adamw_launch(const TensorRef* params, const ConstTensorRef* grads, const TensorRef* master, const TensorRef* m,
                  const TensorRef* v, std::size_t n, const AdamWConfig& config, const int* found_inf, Stream stream) {
  std::vector<void*> lp(n), lg(n), lm(n), lv(n), lw(n);
  std::vector<std::size_t> counts(n);
  for (std::size_t t = 0; t < n; ++t) {
    if (grads[t].count != params[t].count || m[t].count != params[t].count || v[t].count != params[t].count ||
        (master && master[t].count != params[t].count))
      throw Error(fmt::format("tensor {}: params, grads and moments differ in length", t), "adamw");
    lp[t] = params[t].data, lg[t] = const_cast<void*>(grads[t].data), lm[t] = m[t].data, lv[t] = v[t].data;
    lw[t] = master ? master[t].data : nullptr;
    counts[t] = params[t].count;
  }
  void* const* lists[5] = {lp.data(), lg.data(), lm.data(), lv.data(), lw.data()};
  const AdamWScalars s = adamw_scalars(config);
  multi_tensor_apply<5>(n, counts.data(), lists, kElementChunk, [&](const MultiTensorArgs<5>& a, int blocks) {
    adamw_kernel<Bf16Master><<<blocks, kThreads, 0, as_stream(stream)>>>(a, s, found_inf);
    check(cudaGetLastError(), "adamw_kernel launch");
  });
}

// ---------------------------------------------------------------- block checksums
__global__ void digest_kernel(const unsigned char* data, std::size_t bytes, std::uint64_t* digests) {
  const std::size_t off = static_cast<std::size_t>(blockIdx.x) * kChecksumBlock;
  const std::size_t len = bytes == 0 ? 0 : min(kChecksumBlock, bytes - off);
  const unsigned char* block = data + off;
  const unsigned l = threadIdx.x;
  std::uint64_t acc = lane_seed(l);
  const std::size_t words = (len + 7) / 8;
  const bool aligned = (reinterpret_cast<std::uintptr_t>(block) & 7) == 0;
  for (std::size_t j = l; j < words; j += kLanes) {
    std::uint64_t w;
    if (aligned && j * 8 + 8 <= len) {
      w = reinterpret_cast<const std::uint64_t*>(block)[j];
    } else {
      w = block_word(block, len, j);
    }
    acc = lane_round(acc, w);
  }
  __shared__ std::uint64_t lanes[kLanes];
  lanes[l] = acc;
  __syncthreads();
  if (l == 0) {
    std::uint64_t h = kP5 + len;
    for (unsigned i = 0; i < kLanes; ++i) h = merge_lane(h, lanes[i]);
    digests[blockIdx.x] = avalanche(h);
  }
}

}  // namespace

bool device_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

void pack(const ConstTensorRef* tensors, std::size_t n, DType dtype, void* bucket, Stream stream) {
  std::vector<const void*> src(n);
  std::vector<void*> dst(n);
  std::vector<std::size_t> bytes(n);
  auto* out = static_cast<unsigned char*>(bucket);
  for (std::size_t t = 0; t < n; ++t) {
    src[t] = tensors[t].data;
    dst[t] = out;
    bytes[t] = tensors[t].count * size_of(dtype);
    out += bytes[t];
  }
  copy_lists(src, dst, bytes, stream);
}

void unpack(const void* bucket, const TensorRef* tensors, std::size_t n, DType dtype, Stream stream) {
  std::vector<const void*> src(n);
  std::vector<void*> dst(n);
  std::vector<std::size_t> bytes(n);
  const auto* in = static_cast<const unsigned char*>(bucket);
  for (std::size_t t = 0; t < n; ++t) {
    src[t] = in;
    dst[t] = tensors[t].data;
    bytes[t] = tensors[t].count * size_of(dtype);
    in += bytes[t];
  }
  copy_lists(src, dst, bytes, stream);
}

void cast_to_half(const float* in, std::uint16_t* out, std::size_t count, float scale, HalfKind kind, int* flag,
                  Stream stream) {
  if (count == 0) return;
  to_half_kernel<<<grid_for(count), kThreads, 0, as_stream(stream)>>>(in, out, count, scale, kind == HalfKind::BF16, flag);
  check(cudaGetLastError(), "to_half_kernel launch");
}

void cast_from_half(const std::uint16_t* in, float* out, std::size_t count, float scale, HalfKind kind, int* flag,
                    Stream stream) {
  if (count == 0) return;
  from_half_kernel<<<grid_for(count), kThreads, 0, as_stream(stream)>>>(in, out, count, scale, kind == HalfKind::BF16, flag);
  check(cudaGetLastError(), "from_half_kernel launch");
}

void l2_norm(const ConstTensorRef* tensors, std::size_t n, DType dtype, double* result, Stream stream) {
  if (dtype != DType::F32 && dtype != DType::F16 && dtype != DType::BF16)
    throw Error(fmt::format("l2_norm takes f32, f16 or bf16, not {}", to_string(dtype)), "kernels");
  const int tag = dtype == DType::F16 ? 1 : dtype == DType::BF16 ? 2 : 0;
  std::vector<void*> ptrs(n);
  std::vector<std::size_t> counts(n);
  std::size_t partials = 0;
  for (std::size_t t = 0; t < n; ++t) {
    ptrs[t] = const_cast<void*>(tensors[t].data);
    counts[t] = tensors[t].count;
    partials += (counts[t] + kNormChunk - 1) / kNormChunk;
  }
  float* work = nullptr;
  check(cudaMallocAsync(reinterpret_cast<void**>(&work), std::max<std::size_t>(1, partials) * sizeof(float),
                        as_stream(stream)),
        "cudaMallocAsync");
  void* const* lists[1] = {ptrs.data()};
  multi_tensor_apply<1>(n, counts.data(), lists, kNormChunk, [&](const MultiTensorArgs<1>& a, int blocks) {
    norm_partials_kernel<<<blocks, kLanes, 0, as_stream(stream)>>>(a, tag, work);
    check(cudaGetLastError(), "norm_partials_kernel launch");
  });
  norm_finish_kernel<<<1, kLanes, 0, as_stream(stream)>>>(work, partials, result);
  check(cudaGetLastError(), "norm_finish_kernel launch");
  check(cudaFreeAsync(work, as_stream(stream)), "cudaFreeAsync");
}

void adamw_f32(const TensorRef* params, const ConstTensorRef* grads, const TensorRef* m, const TensorRef* v,
               std::size_t n, const AdamWConfig& config, const int* found_inf, Stream stream) {
  adamw_launch<false>(params, grads, nullptr, m, v, n, config, found_inf, stream);
}

void adamw_bf16_master(const TensorRef* params_bf16, const ConstTensorRef* grads_bf16, const TensorRef* master,
                       const TensorRef* m, const TensorRef* v, std::size_t n, const AdamWConfig& config,
                       const int* found_inf, Stream stream) {
  adamw_launch<true>(params_bf16, grads_bf16, master, m, v, n, config, found_inf, stream);
}

void block_digests(const void* data, std::size_t bytes, std::uint64_t* digests, Stream stream) {
  const std::size_t blocks = std::max<std::size_t>(1, (bytes + kChecksumBlock - 1) / kChecksumBlock);
  digest_kernel<<<static_cast<unsigned>(blocks), kLanes, 0, as_stream(stream)>>>(static_cast<const unsigned char*>(data),
                                                                                 bytes, digests);
  check(cudaGetLastError(), "digest_kernel launch");
}

}  // namespace trainrt::kernels::cuda
