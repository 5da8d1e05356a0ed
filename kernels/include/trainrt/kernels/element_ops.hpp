#pragma once
// The arithmetic every kernel and its CPU twin share, written once for host and device, with every
// fused multiply-add explicit (CUDA code is built with --fmad=false), so GPU and CPU results are
// bitwise identical by construction.
#include <cmath>
#include <cstdint>

#include "trainrt/kernels/half.hpp"
#include "trainrt/kernels/tensor_list.hpp"

namespace trainrt::kernels {

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

// One AdamW element: decoupled weight decay, bias correction, scaled gradient.
TRAINRT_HD void adamw_element(float& p, float g, float& m, float& v, const AdamWScalars& s) {
  g = g * s.inv_grad_scale;
  m = fmaf(s.beta1, m, s.one_minus_beta1 * g);
  v = fmaf(s.beta2, v, s.one_minus_beta2 * (g * g));
  const float mhat = m * s.inv_bc1;
  const float vhat = v * s.inv_bc2;
  p = p * s.decay_factor;
  p = p - s.lr * (mhat / (sqrtf(vhat) + s.eps));
}

TRAINRT_HD float load_as_f32(const void* base, std::size_t i, int dtype_tag) {
  // dtype_tag: 0 f32, 1 f16, 2 bf16
  if (dtype_tag == 1) return f16_to_f32(static_cast<const std::uint16_t*>(base)[i]);
  if (dtype_tag == 2) return bf16_to_f32(static_cast<const std::uint16_t*>(base)[i]);
  return static_cast<const float*>(base)[i];
}

// trainrt-block64 v1, per lane: xxHash64's round.
constexpr std::uint64_t kP1 = 0x9E3779B185EBCA87ull;
constexpr std::uint64_t kP2 = 0xC2B2AE3D27D4EB4Full;
constexpr std::uint64_t kP3 = 0x165667B19E3779F9ull;
constexpr std::uint64_t kP4 = 0x85EBCA77C2B2AE63ull;
constexpr std::uint64_t kP5 = 0x27D4EB2F165667C5ull;

TRAINRT_HD std::uint64_t rotl64(std::uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
TRAINRT_HD std::uint64_t lane_round(std::uint64_t acc, std::uint64_t w) { return rotl64(acc + w * kP2, 31) * kP1; }
TRAINRT_HD std::uint64_t lane_seed(unsigned lane) { return kP5 + lane; }
TRAINRT_HD std::uint64_t merge_lane(std::uint64_t h, std::uint64_t lane_acc) {
  return (h ^ lane_round(0, lane_acc)) * kP1 + kP4;
}
TRAINRT_HD std::uint64_t avalanche(std::uint64_t h) {
  h ^= h >> 33;
  h *= kP2;
  h ^= h >> 29;
  h *= kP3;
  h ^= h >> 32;
  return h;
}
// Word j of a block of `len` bytes, zero-padded past the end (blocks need not be 8-byte aligned).
TRAINRT_HD std::uint64_t block_word(const unsigned char* block, std::size_t len, std::size_t j) {
  std::uint64_t w = 0;
  const std::size_t off = j * 8;
  if (off + 8 <= len) {
    for (int b = 7; b >= 0; --b) w = (w << 8) | block[off + static_cast<std::size_t>(b)];
  } else {
    for (std::size_t b = len; b-- > off;) w = (w << 8) | block[b];
  }
  return w;
}

}  // namespace trainrt::kernels
