// The reductions: the multi-tensor L2 norm (one launch: per-chunk partials, then the last block to
// finish reduces them in a fixed order) and the trainrt-block64 v2 block digests. Both are
// deterministic: every sum and merge follows the shapes of element_ops.hpp, which depend on the
// tensor sizes only; the grid-stride loops change which block computes a chunk, not how.
#include <fmt/format.h>

#include "cuda_common.cuh"

namespace trainrt::kernels::cuda {
namespace {

using namespace detail;

// ---------------------------------------------------------------- L2 norm
struct NormDesc {
  const void* data;
  std::size_t count;
  std::size_t first_unit;  // global number of the tensor's chunk 0
  int vec;                 // 1 when data allows 4-element vector loads (16 bytes f32, 8 bytes 16-bit)
};

// Four consecutive elements widened to f32, from one vector load.
template <int Tag>
__device__ __forceinline__ void load4(const void* base, std::size_t i, float x[4]) {
  if constexpr (Tag == 0) {
    const float4 f = *reinterpret_cast<const float4*>(static_cast<const float*>(base) + i);
    x[0] = f.x, x[1] = f.y, x[2] = f.z, x[3] = f.w;
  } else {
    const uint2 u = *reinterpret_cast<const uint2*>(static_cast<const std::uint16_t*>(base) + i);
    const std::uint16_t h[4] = {static_cast<std::uint16_t>(u.x), static_cast<std::uint16_t>(u.x >> 16),
                                static_cast<std::uint16_t>(u.y), static_cast<std::uint16_t>(u.y >> 16)};
#pragma unroll
    for (int c = 0; c < 4; ++c) x[c] = Tag == 1 ? f16_to_f32(h[c]) : bf16_to_f32(h[c]);
  }
}

// This thread's lane value for the chunk at element `begin`: lane l owns slots l, l+256, l+512,
// l+768 (4 elements each), accumulator a[c] per position, one fmaf per element in slot order.
template <int Tag>
__device__ __forceinline__ float norm_lane(const NormDesc& d, std::size_t begin) {
  const unsigned l = threadIdx.x;
  const std::size_t len = min(kNormChunk, d.count - begin);
  float a[kNormVec] = {0.f, 0.f, 0.f, 0.f};
  if (d.vec && len == kNormChunk) {
    float x[kNormSlotsPerLane][kNormVec];  // every load issued before the first fmaf
#pragma unroll
    for (unsigned j = 0; j < kNormSlotsPerLane; ++j) load4<Tag>(d.data, begin + (j * kLanes + l) * kNormVec, x[j]);
#pragma unroll
    for (unsigned j = 0; j < kNormSlotsPerLane; ++j)
#pragma unroll
      for (unsigned c = 0; c < kNormVec; ++c) a[c] = fmaf(x[j][c], x[j][c], a[c]);
  } else {
#pragma unroll
    for (unsigned j = 0; j < kNormSlotsPerLane; ++j)
#pragma unroll
      for (unsigned c = 0; c < kNormVec; ++c) {
        const std::size_t e = (j * kLanes + l) * kNormVec + c;
        if (e < len) {
          const float x = load_as_f32(d.data, begin + e, Tag);
          a[c] = fmaf(x, x, a[c]);
        }
      }
  }
  return norm_lane_value(a);
}

// One launch: blocks take chunks grid-stride and write each chunk's f32 partial to partials[k]
// (k = the chunk's global number); the block that finishes last (a counter, zeroed by a memset
// that precedes the launch) adds them: lane l sums partials l, l+256, ... in double, in order, then
// tree256. No step depends on gridDim, so the result is the CPU twin's, bit for bit.
constexpr int kNormInline = 64;        // descriptors passed in the kernel's parameters
constexpr unsigned kPartialBatch = 16;  // partials each lane loads before adding them, in order

template <int Tag>
__global__ void __launch_bounds__(kThreads)
    norm_kernel(const __grid_constant__ InlineTable<NormDesc, kNormInline> inline_part, const NormDesc* device_table,
                int n, std::size_t chunks, float* __restrict__ partials, unsigned* counter, double* result) {
  __shared__ float fheads[kLanes / 32];
  __shared__ double dheads[kLanes / 32];
  __shared__ bool last;
  const NormDesc* table = table_of(inline_part, device_table);
  for (std::size_t k = blockIdx.x; k < chunks; k += gridDim.x) {
    const NormDesc d = table[find_tensor(table, n, k)];
    const float lane = norm_lane<Tag>(d, (k - d.first_unit) * kNormChunk);
    const float partial = block_tree256(lane, AddOp{}, fheads);
    if (threadIdx.x == 0) partials[k] = partial;
  }
  // Publish this block's partials before counting it as done (the threadFenceReduction pattern).
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(counter, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  // One block adds every partial: a lane's loads of one batch are all issued before its first add,
  // so the chain pays one L2 round trip per batch instead of one per partial (at 1 GiB of f32 a
  // lane adds 256 partials); the adds themselves keep their order.
  double acc = 0.0;
  std::size_t k = threadIdx.x;
  for (; k + (kPartialBatch - 1) * kThreads < chunks; k += kPartialBatch * kThreads) {
    float p[kPartialBatch];
#pragma unroll
    for (unsigned j = 0; j < kPartialBatch; ++j) p[j] = __ldcg(partials + k + j * kThreads);
#pragma unroll
    for (unsigned j = 0; j < kPartialBatch; ++j) acc = acc + static_cast<double>(p[j]);
  }
  for (; k < chunks; k += kThreads) acc = acc + static_cast<double>(__ldcg(partials + k));
  const double total = block_tree256(acc, AddOp{}, dheads);
  if (threadIdx.x == 0) *result = sqrt(total);
}

// ---------------------------------------------------------------- block digests
constexpr unsigned kSegmentsPerLane = static_cast<unsigned>(kChecksumBlock / kDigestSegment / kLanes);  // 16

__device__ __forceinline__ std::uint64_t lane_two(std::uint64_t acc, uint4 x) {
  acc = lane_round(acc, static_cast<std::uint64_t>(x.x) | (static_cast<std::uint64_t>(x.y) << 32));
  return lane_round(acc, static_cast<std::uint64_t>(x.z) | (static_cast<std::uint64_t>(x.w) << 32));
}

// A full 64 KiB block: this lane's 16 segments, four loads in flight at a time, rounds in order.
template <int Q>
__device__ __forceinline__ std::uint64_t digest_full_lane(const uint4* base, unsigned sh, std::uint64_t acc) {
#pragma unroll
  for (unsigned j0 = 0; j0 < kSegmentsPerLane; j0 += 4) {
    uint4 x[4];
#pragma unroll
    for (unsigned k = 0; k < 4; ++k) x[k] = load16<Q>(base, (j0 + k) * kLanes + threadIdx.x, sh);
#pragma unroll
    for (unsigned k = 0; k < 4; ++k) acc = lane_two(acc, x[k]);
  }
  return acc;
}

__global__ void __launch_bounds__(kThreads)
    digest_kernel(const unsigned char* __restrict__ data, std::size_t bytes, std::size_t blocks,
                  std::uint64_t* __restrict__ digests) {
  __shared__ std::uint64_t heads[kLanes / 32];
  for (std::size_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    const std::size_t off = b * kChecksumBlock;
    const std::size_t len = bytes == 0 ? 0 : min(kChecksumBlock, bytes - off);
    const unsigned char* block = data + off;
    std::uint64_t acc = lane_seed(threadIdx.x);
    if (len == kChecksumBlock) {
      const unsigned r = static_cast<unsigned>(daddr(block) & 15);
      const auto* base = reinterpret_cast<const uint4*>(block - r);
      const unsigned sh = 8u * (r & 3u);
      TRAINRT_DISPATCH_SHIFT(r, acc = digest_full_lane<Q>(base, sh, acc))
    } else {  // the buffer's last, short block: byte loads, zero padding
      const std::size_t segments = (len + kDigestSegment - 1) / kDigestSegment;
      for (std::size_t s = threadIdx.x; s < segments; s += kLanes)
        acc = lane_round(lane_round(acc, block_word(block, len, 2 * s)), block_word(block, len, 2 * s + 1));
    }
    const std::uint64_t root = block_tree256(acc, MergeOp{}, heads);
    if (threadIdx.x == 0) digests[b] = digest_finish(len, root);
  }
}

}  // namespace

void l2_norm(const ConstTensorRef* tensors, std::size_t n, DType dtype, double* result, Stream stream) {
  if (dtype != DType::F32 && dtype != DType::F16 && dtype != DType::BF16)
    throw UsageError(fmt::format("l2_norm takes f32, f16 or bf16, not {}", to_string(dtype)), "kernels");
  require_aligned(tensors, n, size_of(dtype), "cuda::l2_norm", "tensors");
  require_aligned(result, alignof(double), "cuda::l2_norm", "result");
  const int tag = dtype == DType::F16 ? 1 : dtype == DType::BF16 ? 2 : 0;
  const std::size_t vec_align = tag == 0 ? 16 : 8;
  const cudaStream_t s = as_stream(stream);
  // Up to kNormInline descriptors travel in the launch's parameters; no host-to-device copy then.
  HostTable<NormDesc, kNormInline> table;
  std::size_t chunks = 0;
  for (std::size_t t = 0; t < n; ++t) {
    if (tensors[t].count == 0) continue;
    table.add({tensors[t].data, tensors[t].count, chunks, addr(tensors[t].data) % vec_align == 0 ? 1 : 0});
    chunks += (tensors[t].count + kNormChunk - 1) / kNormChunk;
  }
  table.finish(s);
  // Scratch: [counter, 16 bytes][partials].
  constexpr std::size_t partials_at = 16;
  Scratch scratch(partials_at + std::max<std::size_t>(1, chunks) * sizeof(float), s);
  check(cudaMemsetAsync(scratch.bytes(), 0, sizeof(unsigned), s), "cudaMemsetAsync (norm counter)");
  auto* counter = reinterpret_cast<unsigned*>(scratch.bytes());
  auto* partials = reinterpret_cast<float*>(scratch.bytes() + partials_at);
  const int count = table.size();
  // No tensor (or only empty ones): one block with no chunks still writes sqrt(0) = 0.
  auto launch = [&](auto kernel) {
    const unsigned grid = grid_size(reinterpret_cast<const void*>(kernel), std::max<std::size_t>(1, chunks));
    probe_before(s);
    kernel<<<grid, kThreads, 0, s>>>(table.inline_part, table.device, count, chunks, partials, counter, result);
    probe_after(s);
  };
  if (tag == 0) launch(&norm_kernel<0>);
  else if (tag == 1) launch(&norm_kernel<1>);
  else launch(&norm_kernel<2>);
  check(cudaGetLastError(), "norm_kernel launch");
  table.release();
  scratch.release();
}

void block_digests(const void* data, std::size_t bytes, std::uint64_t* digests, Stream stream) {
  require_aligned(digests, alignof(std::uint64_t), "cuda::block_digests", "digests");
  const std::size_t blocks = std::max<std::size_t>(1, (bytes + kChecksumBlock - 1) / kChecksumBlock);
  const unsigned grid = grid_size(reinterpret_cast<const void*>(&digest_kernel), blocks);
  probe_before(as_stream(stream));
  digest_kernel<<<grid, kThreads, 0, as_stream(stream)>>>(static_cast<const unsigned char*>(data), bytes, blocks, digests);
  probe_after(as_stream(stream));
  check(cudaGetLastError(), "digest_kernel launch");
}

}  // namespace trainrt::kernels::cuda
