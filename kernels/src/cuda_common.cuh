#pragma once
// Shared by the CUDA kernel files: error checks, the per-device context (SM count, scratch pool),
// grid sizing, stream-ordered scratch, tensor tables passed inline or uploaded, and the device
// helpers every kernel uses (tensor lookup, the tree256 reduction, shifted 16-byte loads).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "trainrt/error.hpp"
#include "trainrt/kernels/alignment.hpp"
#include "trainrt/kernels/cuda.hpp"
#include "trainrt/kernels/element_ops.hpp"

namespace trainrt::kernels::cuda::detail {

constexpr int kThreads = 256;  // every kernel; equals kLanes, which the reduction contracts rely on
static_assert(kThreads == static_cast<int>(kLanes), "one thread per lane");

// Throws trainrt::Error("<what>: <CUDA error name>: <text>") unless rc is cudaSuccess.
void check(cudaError_t rc, const char* what);
inline cudaStream_t as_stream(Stream s) { return static_cast<cudaStream_t>(s); }

// cuda.hpp's set_launch_events: record this thread's `before` / `after` event on the stream, if set.
void probe_before(cudaStream_t stream);
void probe_after(cudaStream_t stream);

// Blocks for a kernel over `units` work units: kWaves x the SM count x the blocks of `kernel` that
// fit on one SM (both queried once per device and cached), at most `units`, at least 1. Blocks
// loop over units grid-stride; a few waves let the hardware scheduler even out the last units
// (one wave of persistent blocks would leave SMs idle when units / slots is just over an integer).
// Only the assignment of units to blocks depends on this, never a result.
constexpr std::size_t kWaves = 4;
unsigned grid_size(const void* kernel, std::size_t units);

// Device memory from this device's scratch pool, allocated and freed in stream order: the memory
// is valid for the work enqueued on `stream` between construction and release().
class Scratch {
 public:
  Scratch(std::size_t bytes, cudaStream_t stream);
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch();  // frees (unchecked) if release() was not reached, e.g. after a failed launch
  void release();  // cudaFreeAsync on the stream, checked
  unsigned char* bytes() const { return static_cast<unsigned char*>(ptr_); }
  // Enqueues a copy of host memory into the scratch at `offset`. cudaMemcpyAsync from pageable
  // memory has consumed `src` when it returns, so `src` may be freed right after.
  void upload(std::size_t offset, const void* src, std::size_t n);

 private:
  void* ptr_ = nullptr;
  cudaStream_t stream_;
};

// A tensor table for a multi-tensor kernel: up to N descriptors travel in the kernel's parameters
// (no copy, no allocation: the common case of a bucket or a few tensors); more go through a
// stream-ordered upload. The kernel reads either through one pointer (see table_of).
template <typename Desc, int N>
struct InlineTable {
  Desc d[N];
};

template <typename Desc, int N>
class HostTable {
 public:
  InlineTable<Desc, N> inline_part{};
  const Desc* device = nullptr;  // non-null when the table was uploaded

  void add(const Desc& d) { all_.push_back(d); }
  int size() const { return static_cast<int>(all_.size()); }
  void finish(cudaStream_t stream) {
    if (all_.size() <= static_cast<std::size_t>(N)) {
      for (std::size_t i = 0; i < all_.size(); ++i) inline_part.d[i] = all_[i];
      return;
    }
    scratch_ = std::make_unique<Scratch>(all_.size() * sizeof(Desc), stream);
    scratch_->upload(0, all_.data(), all_.size() * sizeof(Desc));
    device = reinterpret_cast<const Desc*>(scratch_->bytes());
  }
  void release() {
    if (scratch_) scratch_->release();
  }

 private:
  std::vector<Desc> all_;
  std::unique_ptr<Scratch> scratch_;
};

// ---------------------------------------------------------------- device helpers
template <typename Desc, int N>
__device__ __forceinline__ const Desc* table_of(const InlineTable<Desc, N>& inline_part, const Desc* device) {
  return device ? device : inline_part.d;
}

// The tensor owning work unit `unit`: the last t with first_unit <= unit (tensors without units are
// not in the table, so first_unit is strictly increasing). Every thread of a block searches the
// same addresses, which the cache broadcasts.
template <typename Desc>
__device__ __forceinline__ int find_tensor(const Desc* d, int n, std::size_t unit) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (d[mid].first_unit <= unit) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

struct AddOp {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};
struct MergeOp {
  __device__ __forceinline__ std::uint64_t operator()(std::uint64_t a, std::uint64_t b) const {
    return digest_merge(a, b);
  }
};

// tree256 (element_ops.hpp) over one value per thread of a 256-thread block: shfl_down strides
// 16..1 inside each warp, then strides 4, 2, 1 over the 8 warp heads. The result is valid in
// thread 0. `heads` is __shared__ T[8]; the call ends with a barrier so it can be reused at once.
template <typename T, typename Op>
__device__ __forceinline__ T block_tree256(T v, Op op, T* heads) {
#pragma unroll
  for (int s = 16; s > 0; s >>= 1) v = op(v, __shfl_down_sync(0xffffffffu, v, s));
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  if (lane == 0) heads[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = heads[lane & 7u];  // lanes 8..31 carry copies no valid lane reads
#pragma unroll
    for (int s = 4; s > 0; s >>= 1) v = op(v, __shfl_down_sync(0xffffffffu, v, s));
  }
  __syncthreads();
  return v;
}

// 16 bytes starting r = 4Q + sh/8 bytes into the aligned vector a, continuing into b (r != 0).
// Q is a template argument so the word array stays in registers.
template <int Q>
__device__ __forceinline__ uint4 funnel16(const uint4& a, const uint4& b, unsigned sh) {
  const unsigned w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
  return make_uint4(__funnelshift_r(w[Q], w[Q + 1], sh), __funnelshift_r(w[Q + 1], w[Q + 2], sh),
                    __funnelshift_r(w[Q + 2], w[Q + 3], sh), __funnelshift_r(w[Q + 3], w[Q + 4], sh));
}

// Loads vector v of a 16-byte stream that starts `r` bytes past the aligned `base` (Q = -1: r == 0).
// For r != 0 it reads the two aligned vectors the 16 bytes straddle; both hold wanted bytes, so it
// never touches a 16-byte line outside the range being read.
template <int Q>
__device__ __forceinline__ uint4 load16(const uint4* base, std::size_t v, unsigned sh) {
  if constexpr (Q < 0) {
    return base[v];
  } else {
    return funnel16<Q>(base[v], base[v + 1], sh);
  }
}

// Runs the statement with `constexpr int Q` = -1 when r == 0, else r / 4: the dispatch to a load16 variant,
// taken once per work unit, never per element.
#define TRAINRT_DISPATCH_SHIFT(r, ...)                                   \
  switch ((r) == 0 ? -1 : static_cast<int>((r) >> 2)) {                  \
    case -1: { constexpr int Q = -1; __VA_ARGS__; } break;                     \
    case 0: { constexpr int Q = 0; __VA_ARGS__; } break;                       \
    case 1: { constexpr int Q = 1; __VA_ARGS__; } break;                       \
    case 2: { constexpr int Q = 2; __VA_ARGS__; } break;                       \
    default: { constexpr int Q = 3; __VA_ARGS__; } break;                      \
  }

inline std::uintptr_t addr(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }
__device__ __forceinline__ std::uintptr_t daddr(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

}  // namespace trainrt::kernels::cuda::detail
