#pragma once
// The one operation order shared by every CUDA kernel and its CPU twin (docs/kernels.md,
// "Operation order"). Per-element arithmetic is written once here for host and device; every fused
// multiply-add is an explicit fmaf, and both sides are compiled without implicit contraction (CUDA
// --fmad=false, host -ffp-contract=off, set on the trainrt_kernels target for every consumer), so each
// intermediate is rounded to float exactly where this file rounds it. Reductions follow the fixed
// shapes below, which depend on the input sizes only (never on the grid or the SM count).
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "trainrt/kernels/half.hpp"
#include "trainrt/kernels/tensor_list.hpp"

namespace trainrt::kernels {

// ---------------------------------------------------------------- AdamW
struct AdamWScalars {
  float lr, beta1, beta2, one_minus_beta1, one_minus_beta2, eps, decay_factor, inv_bc1, inv_bc2, inv_grad_scale;
};

// Host-side: the per-step constants, computed once in double and rounded to float.
inline AdamWScalars adamw_scalars(const AdamWConfig& c) {
  AdamWScalars s;
  s.lr = c.lr;
  s.beta1 = c.beta1;
  s.beta2 = c.beta2;
  s.one_minus_beta1 = static_cast<float>(1.0 - c.beta1);
  s.one_minus_beta2 = static_cast<float>(1.0 - c.beta2);
  s.eps = c.eps;
  s.decay_factor = static_cast<float>(1.0 - static_cast<double>(c.lr) * c.weight_decay);
  s.inv_bc1 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(c.beta1), c.step)));
  s.inv_bc2 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(c.beta2), c.step)));
  s.inv_grad_scale = c.inv_grad_scale;
  return s;
}

// One AdamW element. Every line is one float rounding (two where an fmaf takes a product that is
// rounded first); the order is the contract. sqrtf and '/' are IEEE round-to-nearest on both sides
// (nvcc's default -prec-sqrt=true -prec-div=true, no fast math on the host).
TRAINRT_HD void adamw_element(float& p, float g, float& m, float& v, const AdamWScalars& s) {
  g = g * s.inv_grad_scale;
  const float mg = s.one_minus_beta1 * g;
  m = fmaf(s.beta1, m, mg);
  const float gg = g * g;
  const float vg = s.one_minus_beta2 * gg;
  v = fmaf(s.beta2, v, vg);
  const float mhat = m * s.inv_bc1;
  const float vhat = v * s.inv_bc2;
  const float denom = sqrtf(vhat) + s.eps;
  const float step = mhat / denom;
  const float delta = s.lr * step;  // rounded on its own: never fused into the subtraction below
  p = p * s.decay_factor;
  p = p - delta;
}

// ---------------------------------------------------------------- L2 norm (shape v2)
// A tensor is cut into chunks of kNormChunk elements. Inside a chunk, lane l (0..255) owns the
// slots l, l+256, l+512, l+768 (slot q = elements 4q..4q+3 of the chunk) and keeps four f32
// accumulators a[c], one per position c in a slot: for each of its slots in order,
// a[c] = fmaf(x, x, a[c]) for every element present. Lane value: (a[0] + a[1]) + (a[2] + a[3]).
// The 256 lane values are combined by tree256 (below) into the chunk's f32 partial.
constexpr unsigned kNormVec = 4;
constexpr unsigned kNormSlotsPerLane = static_cast<unsigned>(kNormChunk / (kLanes * kNormVec));
static_assert(kNormSlotsPerLane * kLanes * kNormVec == kNormChunk, "the norm chunk is whole slots");

TRAINRT_HD float load_as_f32(const void* base, std::size_t i, int dtype_tag) {
  // dtype_tag: 0 f32, 1 f16, 2 bf16
  if (dtype_tag == 1) return f16_to_f32(static_cast<const std::uint16_t*>(base)[i]);
  if (dtype_tag == 2) return bf16_to_f32(static_cast<const std::uint16_t*>(base)[i]);
  return static_cast<const float*>(base)[i];
}

TRAINRT_HD float norm_lane_value(const float a[kNormVec]) { return (a[0] + a[1]) + (a[2] + a[3]); }

// tree256: the one reduction tree over 256 lane values v[0..255], "warp first":
//   1. in each group of 32 consecutive lanes (g = 0..7), for s = 16, 8, 4, 2, 1:
//        v[32g + i] = op(v[32g + i], v[32g + i + s]) for i < s;
//   2. over the 8 group heads h[g] = v[32g], for s = 4, 2, 1: h[i] = op(h[i], h[i + s]) for i < s;
//   3. the result is h[0].
// Step 1 is what __shfl_down_sync does on a warp, so the GPU needs no shared memory until step 2.
// The host version below is the CPU twins' (the tests spell the tree out independently).
template <typename T, typename Op>
inline T tree256_host(T* v, Op op) {
  for (unsigned g = 0; g < kLanes / 32; ++g)
    for (unsigned s = 16; s > 0; s /= 2)
      for (unsigned i = 0; i < s; ++i) v[32 * g + i] = op(v[32 * g + i], v[32 * g + i + s]);
  T h[kLanes / 32];
  for (unsigned g = 0; g < kLanes / 32; ++g) h[g] = v[32 * g];
  for (unsigned s = 4; s > 0; s /= 2)
    for (unsigned i = 0; i < s; ++i) h[i] = op(h[i], h[i + s]);
  return h[0];
}

// ---------------------------------------------------------------- trainrt-block64 v2 (checksums)
constexpr std::uint64_t kP1 = 0x9E3779B185EBCA87ull;
constexpr std::uint64_t kP2 = 0xC2B2AE3D27D4EB4Full;
constexpr std::uint64_t kP3 = 0x165667B19E3779F9ull;
constexpr std::uint64_t kP4 = 0x85EBCA77C2B2AE63ull;
constexpr std::uint64_t kP5 = 0x27D4EB2F165667C5ull;
// A block is read as 16-byte segments (zero-padded past the block's end), each two little-endian
// 64-bit words; segment s goes to lane s mod 256, which applies lane_round to its first word, then
// to its second. The lanes are merged by tree256 with op = digest_merge (parallel on the GPU).
constexpr std::size_t kDigestSegment = 16;

TRAINRT_HD std::uint64_t rotl64(std::uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
// xxHash64's round: a bijection of w for a fixed acc, so any single changed word changes the lane.
TRAINRT_HD std::uint64_t lane_round(std::uint64_t acc, std::uint64_t w) { return rotl64(acc + w * kP2, 31) * kP1; }
TRAINRT_HD std::uint64_t lane_seed(unsigned lane) { return kP5 + lane; }
// xxHash64's merge step; a bijection of either argument for a fixed other, so one changed lane
// always changes the tree's root.
TRAINRT_HD std::uint64_t digest_merge(std::uint64_t a, std::uint64_t b) { return (a ^ lane_round(0, b)) * kP1 + kP4; }
TRAINRT_HD std::uint64_t avalanche(std::uint64_t h) {
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}
// The block digest from the tree's root and the block length (so zero padding is not ambiguous).
TRAINRT_HD std::uint64_t digest_finish(std::size_t len, std::uint64_t root) {
  return avalanche(digest_merge(kP5 + static_cast<std::uint64_t>(len), root));
}
// Word j of a block of `len` bytes, little-endian, zero-padded past the end, any alignment.
TRAINRT_HD std::uint64_t block_word(const unsigned char* block, std::size_t len, std::size_t j) {
  std::uint64_t w = 0;
  const std::size_t off = j * 8;
  for (std::size_t b = 8; b-- > 0;)
    if (off + b < len) w = (w << 8) | block[off + b];
    else w <<= 8;
  return w;
}

}  // namespace trainrt::kernels
