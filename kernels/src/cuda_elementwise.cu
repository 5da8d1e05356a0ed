// Element-wise kernels: the scaled casts and fused AdamW. Each element goes through exactly the
// element_ops.hpp / half.hpp code the CPU twin runs, so vector width and grid shape only change
// how elements are fetched, never a result. Vectors are 4 elements: 16 bytes of f32, 8 of 16-bit.
#include <fmt/format.h>

#include "cuda_common.cuh"

namespace trainrt::kernels::cuda {
namespace {

using namespace detail;

// ---------------------------------------------------------------- casts
// Elements [0, head) and [tail_at, n) are scalar; groups of 4 in between are vectors. The f32 side
// is the one aligned to 16 bytes; the 16-bit side is stored/loaded as 8 bytes when its alignment
// allows, else as scalars (a layout that only arises for deliberately offset pointers).
struct CastShape {
  std::size_t head, groups, tail_at;
};
CastShape cast_shape(const float* f, std::size_t n) {
  const std::size_t head = std::min<std::size_t>(n, ((16 - (addr(f) & 15)) & 15) / 4);
  const std::size_t groups = (n - head) / 4;
  return {head, groups, head + 4 * groups};
}

__device__ __forceinline__ std::uint16_t to_half(float x, bool bf16) { return bf16 ? f32_to_bf16(x) : f32_to_f16(x); }
__device__ __forceinline__ float from_half(std::uint16_t h, bool bf16) { return bf16 ? bf16_to_f32(h) : f16_to_f32(h); }

__device__ __forceinline__ bool to_half_one(const float* in, std::uint16_t* out, std::size_t i, float scale, bool bf16) {
  const float x = in[i] * scale;
  const std::uint16_t h = to_half(x, bf16);
  out[i] = h;
  return !isfinite(from_half(h, bf16)) || !isfinite(in[i]);
}

__global__ void __launch_bounds__(kThreads)
    to_half_kernel(const float* __restrict__ in, std::uint16_t* __restrict__ out, std::size_t n, CastShape shape,
                   float scale, bool bf16, int* flag) {
  bool bad = false;
  const std::size_t gid = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (gid < shape.head) bad |= to_half_one(in, out, gid, scale, bf16);
  if (gid < n - shape.tail_at) bad |= to_half_one(in, out, shape.tail_at + gid, scale, bf16);
  const bool out8 = (daddr(out + shape.head) & 7) == 0;
  const auto* in4 = reinterpret_cast<const float4*>(in + shape.head);
  for (std::size_t q = gid; q < shape.groups; q += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const float4 x = in4[q];
    const std::uint16_t h0 = to_half(x.x * scale, bf16), h1 = to_half(x.y * scale, bf16),
                        h2 = to_half(x.z * scale, bf16), h3 = to_half(x.w * scale, bf16);
    bad |= !isfinite(from_half(h0, bf16)) || !isfinite(from_half(h1, bf16)) || !isfinite(from_half(h2, bf16)) ||
           !isfinite(from_half(h3, bf16)) || !isfinite(x.x) || !isfinite(x.y) || !isfinite(x.z) || !isfinite(x.w);
    std::uint16_t* o = out + shape.head + 4 * q;
    if (out8) {
      *reinterpret_cast<uint2*>(o) = make_uint2(h0 | (static_cast<unsigned>(h1) << 16), h2 | (static_cast<unsigned>(h3) << 16));
    } else {
      o[0] = h0, o[1] = h1, o[2] = h2, o[3] = h3;
    }
  }
  if (__syncthreads_or(bad) && threadIdx.x == 0) atomicExch(flag, 1);
}

__device__ __forceinline__ bool from_half_one(const std::uint16_t* in, float* out, std::size_t i, float scale, bool bf16) {
  const float x = from_half(in[i], bf16) * scale;
  out[i] = x;
  return !isfinite(x);
}

__global__ void __launch_bounds__(kThreads)
    from_half_kernel(const std::uint16_t* __restrict__ in, float* __restrict__ out, std::size_t n, CastShape shape,
                     float scale, bool bf16, int* flag) {
  bool bad = false;
  const std::size_t gid = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (gid < shape.head) bad |= from_half_one(in, out, gid, scale, bf16);
  if (gid < n - shape.tail_at) bad |= from_half_one(in, out, shape.tail_at + gid, scale, bf16);
  const bool in8 = (daddr(in + shape.head) & 7) == 0;
  auto* out4 = reinterpret_cast<float4*>(out + shape.head);
  for (std::size_t q = gid; q < shape.groups; q += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::uint16_t* i4 = in + shape.head + 4 * q;
    std::uint16_t h[4];
    if (in8) {
      const uint2 u = *reinterpret_cast<const uint2*>(i4);
      h[0] = static_cast<std::uint16_t>(u.x), h[1] = static_cast<std::uint16_t>(u.x >> 16);
      h[2] = static_cast<std::uint16_t>(u.y), h[3] = static_cast<std::uint16_t>(u.y >> 16);
    } else {
      h[0] = i4[0], h[1] = i4[1], h[2] = i4[2], h[3] = i4[3];
    }
    const float4 x = make_float4(from_half(h[0], bf16) * scale, from_half(h[1], bf16) * scale,
                                 from_half(h[2], bf16) * scale, from_half(h[3], bf16) * scale);
    out4[q] = x;
    bad |= !isfinite(x.x) || !isfinite(x.y) || !isfinite(x.z) || !isfinite(x.w);
  }
  if (__syncthreads_or(bad) && threadIdx.x == 0) atomicExch(flag, 1);
}

// ---------------------------------------------------------------- AdamW
constexpr std::size_t kAdamUnit = 8192;  // elements per work unit (a multiple of 4)
constexpr int kAdamInline = 48;          // descriptors in the kernel's parameters (< 4 KiB in all)

struct AdamDesc {
  void* p;        // f32 params, or bf16 params with a master
  const void* g;  // f32 or bf16 grads
  float* m;
  float* v;
  float* w;       // f32 master (bf16 mode), else nullptr
  std::size_t count;
  std::size_t first_unit;
  int head;       // elements before the arrays' common 16-byte boundary (0..3), or -1: no common one
};

template <bool Bf16>
__device__ __forceinline__ void adamw_one(const AdamDesc& d, std::size_t i, const AdamWScalars& s) {
  float m = d.m[i], v = d.v[i];
  if constexpr (Bf16) {
    float w = d.w[i];
    adamw_element(w, bf16_to_f32(static_cast<const std::uint16_t*>(d.g)[i]), m, v, s);
    d.w[i] = w;
    static_cast<std::uint16_t*>(d.p)[i] = f32_to_bf16(w);
  } else {
    float p = static_cast<float*>(d.p)[i];
    adamw_element(p, static_cast<const float*>(d.g)[i], m, v, s);
    static_cast<float*>(d.p)[i] = p;
  }
  d.m[i] = m, d.v[i] = v;
}

__device__ __forceinline__ void unpack4(const uint2 u, float out[4]) {
  out[0] = bf16_to_f32(static_cast<std::uint16_t>(u.x)), out[1] = bf16_to_f32(static_cast<std::uint16_t>(u.x >> 16));
  out[2] = bf16_to_f32(static_cast<std::uint16_t>(u.y)), out[3] = bf16_to_f32(static_cast<std::uint16_t>(u.y >> 16));
}

// Four elements starting at i, which is on the arrays' common 16-byte (8-byte for bf16) boundary.
template <bool Bf16>
__device__ __forceinline__ void adamw_four(const AdamDesc& d, std::size_t i, const AdamWScalars& s) {
  float4 m = *reinterpret_cast<const float4*>(d.m + i), v = *reinterpret_cast<const float4*>(d.v + i);
  float4 p;
  float g[4];
  if constexpr (Bf16) {
    p = *reinterpret_cast<const float4*>(d.w + i);
    unpack4(*reinterpret_cast<const uint2*>(static_cast<const std::uint16_t*>(d.g) + i), g);
  } else {
    p = *reinterpret_cast<const float4*>(static_cast<const float*>(d.p) + i);
    const float4 g4 = *reinterpret_cast<const float4*>(static_cast<const float*>(d.g) + i);
    g[0] = g4.x, g[1] = g4.y, g[2] = g4.z, g[3] = g4.w;
  }
  adamw_element(p.x, g[0], m.x, v.x, s);
  adamw_element(p.y, g[1], m.y, v.y, s);
  adamw_element(p.z, g[2], m.z, v.z, s);
  adamw_element(p.w, g[3], m.w, v.w, s);
  *reinterpret_cast<float4*>(d.m + i) = m;
  *reinterpret_cast<float4*>(d.v + i) = v;
  if constexpr (Bf16) {
    *reinterpret_cast<float4*>(d.w + i) = p;
    const unsigned lo = f32_to_bf16(p.x) | (static_cast<unsigned>(f32_to_bf16(p.y)) << 16);
    const unsigned hi = f32_to_bf16(p.z) | (static_cast<unsigned>(f32_to_bf16(p.w)) << 16);
    *reinterpret_cast<uint2*>(static_cast<std::uint16_t*>(d.p) + i) = make_uint2(lo, hi);
  } else {
    *reinterpret_cast<float4*>(static_cast<float*>(d.p) + i) = p;
  }
}

template <bool Bf16>
__global__ void __launch_bounds__(kThreads)
    adamw_kernel(const __grid_constant__ InlineTable<AdamDesc, kAdamInline> inline_part, const AdamDesc* device_table,
                 int n, std::size_t units, AdamWScalars s, const int* found_inf) {
  if (found_inf && *found_inf) return;
  const AdamDesc* table = table_of(inline_part, device_table);
  for (std::size_t u = blockIdx.x; u < units; u += gridDim.x) {
    const AdamDesc d = table[find_tensor(table, n, u)];
    const std::size_t begin = (u - d.first_unit) * kAdamUnit;
    const std::size_t end = min(begin + kAdamUnit, d.count);
    if (d.head < 0) {
      for (std::size_t i = begin + threadIdx.x; i < end; i += kThreads) adamw_one<Bf16>(d, i, s);
      continue;
    }
    // begin is a multiple of 4, so the unit's vectors start `head` elements in.
    const std::size_t vec_begin = min(begin + static_cast<std::size_t>(d.head), end);
    const std::size_t groups = (end - vec_begin) / 4;
    const std::size_t tail_at = vec_begin + 4 * groups;
    if (threadIdx.x < vec_begin - begin) adamw_one<Bf16>(d, begin + threadIdx.x, s);
    if (threadIdx.x < end - tail_at) adamw_one<Bf16>(d, tail_at + threadIdx.x, s);
    for (std::size_t q = threadIdx.x; q < groups; q += kThreads) adamw_four<Bf16>(d, vec_begin + 4 * q, s);
  }
}

// The element offset at which every array of the tensor is on a vector boundary, or -1.
int common_head(const AdamDesc& d, bool bf16) {
  const std::uintptr_t f32s[] = {bf16 ? addr(d.w) : addr(d.p), addr(d.m), addr(d.v), bf16 ? addr(d.m) : addr(d.g)};
  const unsigned phase = (f32s[0] >> 2) & 3;  // element index mod 4 of the array's 16-byte boundary
  for (std::uintptr_t a : f32s)
    if ((a & 3) != 0 || ((a >> 2) & 3) != phase) return -1;
  if (bf16)
    for (std::uintptr_t a : {addr(d.p), addr(d.g)})
      if ((a & 1) != 0 || ((a >> 1) & 3) != phase) return -1;
  return static_cast<int>((4 - phase) & 3);
}

template <bool Bf16>
void adamw_launch(const TensorRef* params, const ConstTensorRef* grads, const TensorRef* master, const TensorRef* m,
                  const TensorRef* v, std::size_t n, const AdamWConfig& config, const int* found_inf, Stream stream) {
  // Even the scalar path loads every element whole (f32: 4 bytes, bf16: 2).
  const char* fn = Bf16 ? "cuda::adamw_bf16_master" : "cuda::adamw_f32";
  const std::size_t p_align = Bf16 ? 2 : 4;
  require_aligned(params, n, p_align, fn, Bf16 ? "params_bf16" : "params");
  require_aligned(grads, n, p_align, fn, Bf16 ? "grads_bf16" : "grads");
  if (master) require_aligned(master, n, 4, fn, "master");
  require_aligned(m, n, 4, fn, "m");
  require_aligned(v, n, 4, fn, "v");
  require_aligned(found_inf, alignof(int), fn, "found_inf");
  HostTable<AdamDesc, kAdamInline> table;
  std::size_t units = 0;
  for (std::size_t t = 0; t < n; ++t) {
    const std::size_t count = params[t].count;
    if (grads[t].count != count || m[t].count != count || v[t].count != count || (master && master[t].count != count))
      throw UsageError(fmt::format("tensor {}: params, grads and moments differ in length", t), "adamw");
    if (count == 0) continue;
    AdamDesc d{params[t].data, grads[t].data, static_cast<float*>(m[t].data), static_cast<float*>(v[t].data),
               master ? static_cast<float*>(master[t].data) : nullptr, count, units, 0};
    d.head = common_head(d, Bf16);
    table.add(d);
    units += (count + kAdamUnit - 1) / kAdamUnit;
  }
  if (units == 0) return;
  const cudaStream_t s = as_stream(stream);
  table.finish(s);
  const unsigned grid = grid_size(reinterpret_cast<const void*>(&adamw_kernel<Bf16>), units);
  probe_before(s);
  adamw_kernel<Bf16><<<grid, kThreads, 0, s>>>(table.inline_part, table.device, table.size(), units,
                                               adamw_scalars(config), found_inf);
  probe_after(s);
  check(cudaGetLastError(), "adamw_kernel launch");
  table.release();
}

}  // namespace

void cast_to_half(const float* in, std::uint16_t* out, std::size_t count, float scale, HalfKind kind, int* flag,
                  Stream stream) {
  if (count == 0) return;
  require_aligned(in, alignof(float), "cuda::cast_to_half", "in");
  require_aligned(out, alignof(std::uint16_t), "cuda::cast_to_half", "out");
  require_aligned(flag, alignof(int), "cuda::cast_to_half", "flag");
  const CastShape shape = cast_shape(in, count);
  const unsigned grid = grid_size(reinterpret_cast<const void*>(&to_half_kernel), std::max<std::size_t>(1, (shape.groups + kThreads - 1) / kThreads));
  probe_before(as_stream(stream));
  to_half_kernel<<<grid, kThreads, 0, as_stream(stream)>>>(in, out, count, shape, scale, kind == HalfKind::BF16, flag);
  probe_after(as_stream(stream));
  check(cudaGetLastError(), "to_half_kernel launch");
}

void cast_from_half(const std::uint16_t* in, float* out, std::size_t count, float scale, HalfKind kind, int* flag,
                    Stream stream) {
  if (count == 0) return;
  require_aligned(in, alignof(std::uint16_t), "cuda::cast_from_half", "in");
  require_aligned(out, alignof(float), "cuda::cast_from_half", "out");
  require_aligned(flag, alignof(int), "cuda::cast_from_half", "flag");
  const CastShape shape = cast_shape(out, count);
  const unsigned grid = grid_size(reinterpret_cast<const void*>(&from_half_kernel), std::max<std::size_t>(1, (shape.groups + kThreads - 1) / kThreads));
  probe_before(as_stream(stream));
  from_half_kernel<<<grid, kThreads, 0, as_stream(stream)>>>(in, out, count, shape, scale, kind == HalfKind::BF16, flag);
  probe_after(as_stream(stream));
  check(cudaGetLastError(), "from_half_kernel launch");
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

}  // namespace trainrt::kernels::cuda
