#pragma once
// IEEE binary16 and bfloat16 <-> binary32 conversions with round-to-nearest-even, bit-exact with
// CUDA's __float2half_rn / __float2bfloat16_rn. Every NaN becomes the one canonical NaN 0x7fff, as
// CUDA's do: a GPU's float arithmetic already returns one canonical NaN (0x7fffffff) whatever NaN
// went in, while x86 keeps the payload and sign, so keeping them would part the GPU from its twin.
// Usable from host and device code.
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define TRAINRT_HD __host__ __device__ __forceinline__
#else
#define TRAINRT_HD inline
#endif

namespace trainrt::kernels {

TRAINRT_HD std::uint32_t f32_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

TRAINRT_HD float bits_f32(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

TRAINRT_HD float bf16_to_f32(std::uint16_t h) { return bits_f32(static_cast<std::uint32_t>(h) << 16); }

TRAINRT_HD std::uint16_t f32_to_bf16(float f) {
  std::uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;  // the canonical NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<std::uint16_t>(u >> 16);
}

TRAINRT_HD float f16_to_f32(std::uint16_t h) {
  std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1fu;
  std::uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (man << 13));  // inf / NaN
  if (exp == 0) {
    if (man == 0) return bits_f32(sign);
    // Subnormal: value = man * 2^-24, exact in binary32.
    float v = static_cast<float>(man) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

TRAINRT_HD std::uint16_t f32_to_f16(float f) {
  std::uint32_t u = f32_bits(f);
  std::uint16_t sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7fffu;  // the canonical NaN, sign dropped
  if (a >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (a < 0x38800000u) {
    // Result is subnormal or zero: shift the significand (with its implicit bit) into place.
    if (a < 0x33000000u) return sign;  // below half the smallest subnormal: +-0
    std::uint32_t exp = a >> 23;
    std::uint32_t man = (a & 0x7fffffu) | 0x800000u;
    std::uint32_t shift = 126u - exp;  // 14 + (113 - exp) - 1 ... brings man to the 2^-24 grid
    std::uint32_t half = man >> shift;
    std::uint32_t rem = man & ((1u << shift) - 1u);
    std::uint32_t mid = 1u << (shift - 1u);
    if (rem > mid || (rem == mid && (half & 1u))) ++half;
    return static_cast<std::uint16_t>(sign | half);
  }
  std::uint32_t r = a + 0xfffu + ((a >> 13) & 1u);  // round to nearest even at bit 13
  return static_cast<std::uint16_t>(sign | ((r - 0x38000000u) >> 13));
}

}  // namespace trainrt::kernels
