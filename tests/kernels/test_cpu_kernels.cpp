// CPU twins against scalar references written here, independently of the twins, compared
// bitwise: pack/unpack, the scaled casts and the block checksums. (Norm and AdamW:
// test_cpu_norm_adamw.cpp.) The references round at every step where the CUDA code rounds.
#define CATCH_CONFIG_MAIN
#include <bit>
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "random_data.hpp"
#include "trainrt/kernels/cpu.hpp"

using namespace trainrt;
using namespace trainrt::kernels;
using trainrt::testing::random_floats;

namespace {

const std::vector<std::size_t> kOddSizes = {0, 1, 3, 4097};

std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// ---- half formats, from their definitions (not from half.hpp)
struct Format {
  int mantissa_bits;  // stored bits
  int bias;
  int exp_bits;
};
constexpr Format kF16{10, 15, 5};
constexpr Format kBF16{7, 127, 8};

// The exact value of a half bit pattern, in double.
double decode(std::uint16_t h, Format f) {
  const bool neg = h >> 15;
  const int e = (h >> f.mantissa_bits) & ((1 << f.exp_bits) - 1);
  const int m = h & ((1 << f.mantissa_bits) - 1);
  double v;
  if (e == (1 << f.exp_bits) - 1) v = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else if (e == 0) v = std::ldexp(m, 1 - f.bias - f.mantissa_bits);
  else v = std::ldexp(m + (1 << f.mantissa_bits), e - f.bias - f.mantissa_bits);
  return neg ? -v : v;
}

// Round a float to the format, ties to even, and encode it. NaN: CUDA's canonical 0x7fff.
std::uint16_t encode_rne(float x, Format f) {
  const std::uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const int emax_field = (1 << f.exp_bits) - 1;
  const std::uint16_t inf = static_cast<std::uint16_t>(sign | (emax_field << f.mantissa_bits));
  if (std::isnan(x)) return 0x7fff;
  const double a = std::fabs(static_cast<double>(x));
  if (std::isinf(a)) return inf;
  if (a == 0) return sign;
  int e;
  std::frexp(a, &e);                                 // a = m 2^e, 1/2 <= m < 1
  int exp = std::max(e - 1, 1 - f.bias);             // leading-bit exponent, clamped at subnormals
  const double ulp = std::ldexp(1.0, exp - f.mantissa_bits);
  const double q = std::nearbyint(a / ulp);          // exact quotient; FE_TONEAREST = ties to even
  // q is in [0, 2^(p+1)]: re-normalise if rounding carried into the next binade.
  double r = q * ulp;
  std::frexp(r, &e);
  if (r == 0) return sign;
  exp = std::max(e - 1, 1 - f.bias);
  if (exp > f.bias) return inf;  // overflow
  const bool subnormal = r < std::ldexp(1.0, 1 - f.bias);
  const int field = subnormal ? 0 : exp + f.bias;
  const auto mant = static_cast<std::uint32_t>(r / std::ldexp(1.0, exp - f.mantissa_bits)) & ((1u << f.mantissa_bits) - 1);
  return static_cast<std::uint16_t>(sign | (field << f.mantissa_bits) | mant);
}

// Inputs that probe every rounding boundary: for each half value, the float exactly halfway to the
// next one (a tie) and its two float neighbours, plus random normals at several magnitudes.
std::vector<float> cast_inputs(Format f) {
  std::vector<float> xs;
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const double a = decode(static_cast<std::uint16_t>(h), f), b = decode(static_cast<std::uint16_t>(h + 1), f);
    if (!std::isfinite(a) || !std::isfinite(b) || (h & 0x7fff) == 0x7fff) continue;
    const float mid = static_cast<float>((a + b) / 2);  // exact in float for both formats
    xs.push_back(static_cast<float>(a));
    xs.push_back(mid);
    xs.push_back(std::nextafter(mid, std::numeric_limits<float>::infinity()));
    xs.push_back(std::nextafter(mid, -std::numeric_limits<float>::infinity()));
  }
  for (float s : {1e-6f, 1.f, 300.f, 1e5f, 1e30f})
    for (float x : random_floats(20000, 11, s)) xs.push_back(x);
  for (float x : {0.f, -0.f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::max(), 65520.f, 65519.99f})
    xs.push_back(x);
  // NaNs as x86 makes them (negative default NaN, payloads, signalling): all must encode as the GPU's
  // one canonical NaN, or the CUDA kernels and their twin part ways.
  for (std::uint32_t u : {0x7fc00000u, 0xffc00000u, 0x7fffffffu, 0xffffffffu, 0x7f800001u, 0x7fa5a5a5u})
    xs.push_back(std::bit_cast<float>(u));
  return xs;
}

}  // namespace

TEST_CASE("pack/unpack: every dtype, odd sizes, misaligned pointers, bytes identical", "[kernels][pack]") {
  for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I32, DType::I64}) {
    const std::size_t es = size_of(t);
    for (std::size_t shift : {0, 1, 3}) {
      std::vector<std::vector<unsigned char>> storage;
      std::vector<ConstTensorRef> in;
      std::size_t total = 0;
      for (std::size_t k = 0; k < kOddSizes.size(); ++k) {
        std::size_t n = kOddSizes[k];
        storage.emplace_back(n * es + shift);
        for (std::size_t b = 0; b < storage.back().size(); ++b) storage.back()[b] = static_cast<unsigned char>(b * 7 + k);
        in.push_back({storage.back().data() + shift, n});
        total += n * es;
      }
      std::vector<unsigned char> bucket(total + 1);
      cpu::pack(in.data(), in.size(), t, bucket.data() + 1);
      std::size_t off = 0;
      for (std::size_t k = 0; k < in.size(); ++k) {
        CHECK(std::memcmp(bucket.data() + 1 + off, in[k].data, in[k].count * es) == 0);
        off += in[k].count * es;
      }
      std::vector<std::vector<unsigned char>> back(in.size());
      std::vector<TensorRef> outs;
      for (std::size_t k = 0; k < in.size(); ++k) {
        back[k].assign(in[k].count * es + 3, 0xee);
        outs.push_back({back[k].data() + 3, in[k].count});
      }
      cpu::unpack(bucket.data() + 1, outs.data(), outs.size(), t);
      for (std::size_t k = 0; k < in.size(); ++k) {
        CHECK(std::memcmp(outs[k].data, in[k].data, in[k].count * es) == 0);
        CHECK(back[k][0] == 0xee);  // nothing written before the tensor
      }
    }
  }
}

TEST_CASE("pack/unpack: thousands of tiny tensors and one huge tensor", "[kernels][pack]") {
  std::mt19937 rng(3);
  std::vector<std::vector<float>> tiny(3000);
  std::vector<ConstTensorRef> in;
  std::size_t total = 0;
  for (auto& t : tiny) {
    t.resize(1 + rng() % 7);
    for (auto& x : t) x = static_cast<float>(rng() % 1000);
    in.push_back({t.data(), t.size()});
    total += t.size();
  }
  std::vector<float> bucket(total);
  cpu::pack(in.data(), in.size(), DType::F32, bucket.data());
  std::size_t pos = 0;
  for (auto& t : tiny)
    for (float x : t) REQUIRE(bucket[pos++] == x);

  const std::size_t huge = std::size_t{1} << 25;  // 128 MiB of f32
  std::vector<float> big(huge), out(huge);
  for (std::size_t i = 0; i < huge; ++i) big[i] = static_cast<float>(i & 0xffff);
  ConstTensorRef h{big.data(), huge};
  TensorRef o{out.data(), huge};
  std::vector<float> flat(huge);
  cpu::pack(&h, 1, DType::F32, flat.data());
  cpu::unpack(flat.data(), &o, 1, DType::F32);
  CHECK(std::memcmp(big.data(), out.data(), huge * 4) == 0);
}

TEST_CASE("the reference encoder agrees with the format's definition", "[kernels][cast]") {
  // Every half value round-trips through decode -> float -> encode_rne, so the reference covers
  // the whole format before it judges the twins.
  for (Format f : {kF16, kBF16})
    for (std::uint32_t h = 0; h < 0x10000; ++h) {
      const double v = decode(static_cast<std::uint16_t>(h), f);
      if (std::isnan(v)) continue;
      REQUIRE(encode_rne(static_cast<float>(v), f) == h);
    }
  CHECK(encode_rne(65520.f, kF16) == 0x7c00);     // halfway to 65536 rounds up to inf
  CHECK(encode_rne(65519.99f, kF16) == 0x7bff);   // just below stays finite
  CHECK(encode_rne(2.98023224e-8f, kF16) == 0);   // 2^-25: a tie with 0, even wins
}

TEST_CASE("cast_to_half: bitwise equal to in*scale (one f32 rounding) then RNE, flag exact", "[kernels][cast]") {
  for (HalfKind kind : {HalfKind::F16, HalfKind::BF16}) {
    const Format f = kind == HalfKind::F16 ? kF16 : kBF16;
    const std::vector<float> xs = cast_inputs(f);
    for (float scale : {1.f, 128.f, 1.f / 1024, 3.f}) {
      std::vector<std::uint16_t> h(xs.size() + 1);
      // Odd element counts and a misaligned output, as the GPU kernel's heads and tails see them.
      for (std::size_t n : {xs.size(), xs.size() - 3, std::size_t{5}, std::size_t{0}}) {
        const bool flag = cpu::cast_to_half(xs.data(), h.data() + 1, n, scale, kind);
        bool want_flag = false;
        for (std::size_t i = 0; i < n; ++i) {
          const float x = xs[i] * scale;  // the kernel's one f32 rounding
          const std::uint16_t want = encode_rne(x, f);
          want_flag |= !std::isfinite(decode(want, f)) || !std::isfinite(xs[i]);
          if (h[1 + i] != want)
            FAIL("element " << i << ": " << xs[i] << " * " << scale << " -> 0x" << std::hex << h[1 + i] << ", want 0x" << want);
        }
        CHECK(flag == want_flag);
      }
    }
  }
  float bad[3] = {1.f, std::numeric_limits<float>::quiet_NaN(), 2.f};
  std::uint16_t out[3];
  CHECK(cpu::cast_to_half(bad, out, 3, 1.f, HalfKind::BF16));
  float big[1] = {1e6f};
  CHECK(cpu::cast_to_half(big, out, 1, 1.f, HalfKind::F16));  // overflows f16
  CHECK_FALSE(cpu::cast_to_half(big, out, 1, 1.f, HalfKind::BF16));
}

TEST_CASE("cast_from_half: bitwise equal to f32(h) * scale for all 65536 halves, flag exact", "[kernels][cast]") {
  std::vector<std::uint16_t> all(0x10001);
  for (std::uint32_t h = 0; h < 0x10000; ++h) all[h + 1] = static_cast<std::uint16_t>(h);  // misaligned input
  for (HalfKind kind : {HalfKind::F16, HalfKind::BF16}) {
    const Format f = kind == HalfKind::F16 ? kF16 : kBF16;
    for (float scale : {1.f, 2.f, 1.f / 1024, 3.5f, 1e30f}) {
      for (std::size_t n : {std::size_t{0x10000}, std::size_t{0x7c01}, std::size_t{3}}) {
        std::vector<float> out(n + 1);
        const bool flag = cpu::cast_from_half(all.data() + 1, out.data() + 1, n, scale, kind);
        bool want_flag = false;
        for (std::size_t i = 0; i < n; ++i) {
          const double v = decode(all[1 + i], f);
          const float want = static_cast<float>(v) * scale;  // widening is exact; one f32 rounding
          want_flag |= !std::isfinite(want);
          // NaN payloads are outside the contract (docs/kernels.md); every other result is bitwise.
          const bool same = std::isnan(want) ? std::isnan(out[1 + i]) : bits(out[1 + i]) == bits(want);
          if (!same) FAIL("half 0x" << std::hex << all[1 + i] << " * " << scale << " -> " << out[1 + i] << ", want " << want);
        }
        CHECK(flag == want_flag);
      }
    }
  }
}

namespace {

// trainrt-block64 v2, spelled out: 64 KiB blocks; 16-byte segments zero-padded, as two
// little-endian words; segment s to lane s % 256, rounds in order; lanes merged warp-first.
std::uint64_t rotl(std::uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
constexpr std::uint64_t P1 = 0x9E3779B185EBCA87ull, P2 = 0xC2B2AE3D27D4EB4Full, P3 = 0x165667B19E3779F9ull,
                        P4 = 0x85EBCA77C2B2AE63ull, P5 = 0x27D4EB2F165667C5ull;
std::uint64_t round64(std::uint64_t acc, std::uint64_t w) { return rotl(acc + w * P2, 31) * P1; }
std::uint64_t merge64(std::uint64_t a, std::uint64_t b) { return (a ^ round64(0, b)) * P1 + P4; }

std::vector<std::uint64_t> reference_digests(const unsigned char* p, std::size_t bytes) {
  std::vector<std::uint64_t> out;
  std::size_t off = 0;
  do {
    const std::size_t len = std::min<std::size_t>(65536, bytes - off);
    std::uint64_t lane[256];
    for (unsigned l = 0; l < 256; ++l) lane[l] = P5 + l;
    for (std::size_t s = 0; s * 16 < len; ++s) {
      for (std::size_t half = 0; half < 2; ++half) {
        std::uint64_t w = 0;
        for (std::size_t b = 0; b < 8; ++b) {
          const std::size_t at = s * 16 + half * 8 + b;
          if (at < len) w |= static_cast<std::uint64_t>(p[off + at]) << (8 * b);
        }
        lane[s % 256] = round64(lane[s % 256], w);
      }
    }
    for (unsigned g = 0; g < 8; ++g)  // within each warp: shfl_down strides 16..1
      for (unsigned s = 16; s >= 1; s /= 2)
        for (unsigned i = 0; i < s; ++i) lane[g * 32 + i] = merge64(lane[g * 32 + i], lane[g * 32 + i + s]);
    for (unsigned s = 4; s >= 1; s /= 2)  // then across the 8 warp heads
      for (unsigned i = 0; i < s; ++i) lane[i * 32] = merge64(lane[i * 32], lane[(i + s) * 32]);
    std::uint64_t h = merge64(P5 + len, lane[0]);
    h ^= h >> 33, h *= P2, h ^= h >> 29, h *= P3, h ^= h >> 32;
    out.push_back(h);
    off += len;
  } while (off < bytes);
  return out;
}

}  // namespace

TEST_CASE("block checksums: the documented contract, any alignment, every bit matters", "[kernels][checksum]") {
  std::mt19937 rng(8);
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{8}, std::size_t{15},
                        std::size_t{16}, std::size_t{17}, std::size_t{4096 * 16 + 16}, std::size_t{65535},
                        std::size_t{65536}, std::size_t{65537}, std::size_t{(1 << 20) + 3}}) {
    std::vector<unsigned char> a(n + 1);
    for (auto& b : a) b = static_cast<unsigned char>(rng());
    const unsigned char* data = a.data() + 1;  // misaligned
    auto d = cpu::block_digests(data, n);
    CHECK(d == reference_digests(data, n));
    CHECK(d.size() == std::max<std::size_t>(1, (n + 65535) / 65536));
    std::vector<unsigned char> aligned(data, data + n);
    CHECK(cpu::checksum(aligned.data(), n) == cpu::checksum(data, n));
    if (n > 0) {
      for (int trial = 0; trial < 20; ++trial) {
        std::size_t bit = rng() % (n * 8);
        aligned[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
        CHECK(cpu::checksum(aligned.data(), n) != cpu::checksum(data, n));
        aligned[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
      }
    }
  }
  // Trailing zeros are not padding: the length is part of every digest.
  std::vector<unsigned char> z(24, 0);
  CHECK(cpu::checksum(z.data(), 16) != cpu::checksum(z.data(), 24));
  CHECK(cpu::checksum(z.data(), 0) != cpu::checksum(z.data(), 1));
}
