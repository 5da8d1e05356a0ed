// pack / unpack: one multi-tensor copy kernel. Each tensor's bytes are cut into 16 KiB units on
// the destination's 16-byte grid, so only a tensor's first unit has a head and only its last a
// tail; the body is 16-byte stores. Loads are 16-byte too: plain when source and destination share
// their alignment mod 16, otherwise two aligned loads and a funnel shift (cuda_common.cuh), so a
// misaligned or odd-sized tensor still moves at vector width on both sides.
#include <fmt/format.h>

#include "cuda_common.cuh"

namespace trainrt::kernels::cuda {
namespace {

using namespace detail;

constexpr std::size_t kCopyUnit = 16 * 1024;  // bytes per work unit: one pass of 4 vectors per thread
constexpr int kCopyInline = 64;               // descriptors passed in the kernel's parameters

struct CopyDesc {
  const unsigned char* src;
  unsigned char* dst;
  std::size_t bytes;
  std::size_t first_unit;  // global number of the tensor's unit 0
};

// `nvec` 16-byte vectors to the aligned `dst` from a stream starting `sh`/8 + 4Q bytes past the
// aligned `src_base`. Four vectors per thread are loaded before any is stored, so each thread has
// 64 bytes in flight.
template <int Q>
__device__ __forceinline__ void copy_vectors(const uint4* __restrict__ src_base, uint4* __restrict__ dst,
                                             std::size_t nvec, unsigned sh) {
  for (std::size_t v0 = threadIdx.x; v0 < nvec; v0 += 4 * kThreads) {
    uint4 x[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const std::size_t v = v0 + static_cast<std::size_t>(k) * kThreads;
      if (v < nvec) x[k] = load16<Q>(src_base, v, sh);
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const std::size_t v = v0 + static_cast<std::size_t>(k) * kThreads;
      if (v < nvec) dst[v] = x[k];
    }
  }
}

// Copies `len` bytes (at most one unit) with the block: a byte-wise head up to dst's next 16-byte
// boundary (< 16 bytes), 16-byte vectors, a byte-wise tail (< 16 bytes).
__device__ void copy_range(const unsigned char* __restrict__ src, unsigned char* __restrict__ dst, std::size_t len) {
  const std::size_t head = min(len, static_cast<std::size_t>((16 - (daddr(dst) & 15)) & 15));
  const std::size_t nvec = (len - head) / 16;
  const std::size_t tail_at = head + nvec * 16;
  if (threadIdx.x < head) dst[threadIdx.x] = src[threadIdx.x];
  if (threadIdx.x < len - tail_at) dst[tail_at + threadIdx.x] = src[tail_at + threadIdx.x];
  if (nvec == 0) return;
  const unsigned char* s = src + head;
  auto* d = reinterpret_cast<uint4*>(dst + head);
  const unsigned r = static_cast<unsigned>(daddr(s) & 15);
  const auto* base = reinterpret_cast<const uint4*>(s - r);
  const unsigned sh = 8u * (r & 3u);
  TRAINRT_DISPATCH_SHIFT(r, copy_vectors<Q>(base, d, nvec, sh))
}

__global__ void __launch_bounds__(kThreads)
    copy_kernel(const __grid_constant__ InlineTable<CopyDesc, kCopyInline> inline_part, const CopyDesc* device_table,
                int n, std::size_t units) {
  const CopyDesc* table = table_of(inline_part, device_table);
  for (std::size_t u = blockIdx.x; u < units; u += gridDim.x) {
    const CopyDesc c = table[find_tensor(table, n, u)];
    const std::size_t k = u - c.first_unit;
    const std::size_t lead = daddr(c.dst) & 15;  // units lie on dst's 16-byte grid
    const std::size_t begin = k == 0 ? 0 : k * kCopyUnit - lead;
    const std::size_t end = min(c.bytes, (k + 1) * kCopyUnit - lead);
    copy_range(c.src + begin, c.dst + begin, end - begin);
  }
}

void copy_tensors(HostTable<CopyDesc, kCopyInline>& table, std::size_t units, Stream stream) {
  if (units == 0) return;
  const cudaStream_t s = as_stream(stream);
  table.finish(s);
  const unsigned grid = grid_size(reinterpret_cast<const void*>(&copy_kernel), units);
  probe_before(s);
  copy_kernel<<<grid, kThreads, 0, s>>>(table.inline_part, table.device, table.size(), units);
  probe_after(s);
  check(cudaGetLastError(), "copy_kernel launch");
  table.release();
}

// Adds one tensor's copy; returns its unit count.
std::size_t add_copy(HostTable<CopyDesc, kCopyInline>& table, const void* src, void* dst, std::size_t bytes,
                     std::size_t first_unit) {
  if (bytes == 0) return 0;
  const std::size_t units = (bytes + (addr(dst) & 15) + kCopyUnit - 1) / kCopyUnit;
  table.add({static_cast<const unsigned char*>(src), static_cast<unsigned char*>(dst), bytes, first_unit});
  return units;
}

}  // namespace

void pack(const ConstTensorRef* tensors, std::size_t n, DType dtype, void* bucket, Stream stream) {
  HostTable<CopyDesc, kCopyInline> table;
  auto* out = static_cast<unsigned char*>(bucket);
  std::size_t units = 0;
  for (std::size_t t = 0; t < n; ++t) {
    const std::size_t bytes = tensors[t].count * size_of(dtype);
    units += add_copy(table, tensors[t].data, out, bytes, units);
    out += bytes;
  }
  copy_tensors(table, units, stream);
}

void unpack(const void* bucket, const TensorRef* tensors, std::size_t n, DType dtype, Stream stream) {
  HostTable<CopyDesc, kCopyInline> table;
  const auto* in = static_cast<const unsigned char*>(bucket);
  std::size_t units = 0;
  for (std::size_t t = 0; t < n; ++t) {
    const std::size_t bytes = tensors[t].count * size_of(dtype);
    units += add_copy(table, in, tensors[t].data, bytes, units);
    in += bytes;
  }
  copy_tensors(table, units, stream);
}

}  // namespace trainrt::kernels::cuda
