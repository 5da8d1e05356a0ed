// CPU twins against straightforward scalar code written here, independently of the twins.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "trainrt/kernels/cpu.hpp"
#include "trainrt/kernels/element_ops.hpp"
#include "random_data.hpp"
#include "trainrt/kernels/half.hpp"

using namespace trainrt;
using namespace trainrt::kernels;
using trainrt::test::random_floats;

namespace {

const std::vector<std::size_t> kOddSizes = {0, 1, 3, 4097};

// Round x to a binary format with `p` significand bits, min normal exponent `emin`, ties to even.
double round_to_format(double x, int p, int emin, double max_finite) {
  if (std::isnan(x) || std::isinf(x) || x == 0) return x;
  int e;
  std::frexp(x, &e);  // x = m * 2^e, 0.5 <= |m| < 1
  int exp = std::max(e - 1, emin);  // exponent of the leading bit, clamped to subnormal range
  double ulp = std::ldexp(1.0, exp - (p - 1));
  double q = x / ulp;
  double r = std::nearbyint(q);  // FE_TONEAREST: ties to even
  double out = r * ulp;
  if (std::fabs(out) > max_finite) return std::copysign(std::numeric_limits<double>::infinity(), x);
  return out;
}

double to_f16_ref(double x) { return round_to_format(x, 11, -14, 65504.0); }
double to_bf16_ref(double x) { return round_to_format(x, 8, -126, 3.3895313892515355e38); }


}  // namespace

TEST_CASE("pack/unpack: every dtype, odd sizes, misaligned pointers", "[kernels][pack]") {
  for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I32, DType::I64}) {
    const std::size_t es = size_of(t);
    std::vector<std::vector<unsigned char>> storage;
    std::vector<ConstTensorRef> in;
    std::size_t total = 0;
    for (std::size_t k = 0; k < kOddSizes.size(); ++k) {
      std::size_t n = kOddSizes[k];
      storage.emplace_back(n * es + 1);
      for (std::size_t b = 0; b < storage.back().size(); ++b) storage.back()[b] = static_cast<unsigned char>(b * 7 + k);
      in.push_back({storage.back().data() + 1, n});  // +1 byte: misaligned for every dtype
      total += n * es;
    }
    std::vector<unsigned char> bucket(total + 1);
    cpu::pack(in.data(), in.size(), t, bucket.data() + 1);
    std::size_t off = 0;
    for (std::size_t k = 0; k < in.size(); ++k) {
      for (std::size_t b = 0; b < in[k].count * es; ++b)
        REQUIRE(bucket[1 + off + b] == static_cast<const unsigned char*>(in[k].data)[b]);
      off += in[k].count * es;
    }
    std::vector<std::vector<unsigned char>> back(in.size());
    std::vector<TensorRef> outs;
    for (std::size_t k = 0; k < in.size(); ++k) {
      back[k].assign(in[k].count * es + 3, 0);
      outs.push_back({back[k].data() + 3, in[k].count});
    }
    cpu::unpack(bucket.data() + 1, outs.data(), outs.size(), t);
    for (std::size_t k = 0; k < in.size(); ++k)
      CHECK(std::memcmp(outs[k].data, in[k].data, in[k].count * es) == 0);
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

TEST_CASE("scaled casts round to nearest even and flag inf/NaN", "[kernels][cast]") {
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{3}, std::size_t{4097}, std::size_t{100003}}) {
    auto x = random_floats(n, 11, 300.f);
    for (float scale : {1.f, 128.f, 1.f / 1024}) {
      std::vector<std::uint16_t> h(n + 1);
      std::vector<float> back(n);
      for (HalfKind kind : {HalfKind::F16, HalfKind::BF16}) {
        bool flag = cpu::cast_to_half(x.data(), h.data() + 1, n, scale, kind);  // misaligned output
        bool any_inf = false;
        for (std::size_t i = 0; i < n; ++i) {
          double want = kind == HalfKind::F16 ? to_f16_ref(static_cast<double>(x[i] * scale))
                                              : to_bf16_ref(static_cast<double>(x[i] * scale));
          double got = kind == HalfKind::F16 ? f16_to_f32(h[1 + i]) : bf16_to_f32(h[1 + i]);
          any_inf |= std::isinf(want);
          if (got != want) FAIL("element " << i << ": " << x[i] << " * " << scale << " -> " << got << ", want " << want);
        }
        CHECK(flag == any_inf);
        bool back_flag = cpu::cast_from_half(h.data() + 1, back.data(), n, 2.f, kind);
        for (std::size_t i = 0; i < n; ++i) {
          double v = (kind == HalfKind::F16 ? f16_to_f32(h[1 + i]) : bf16_to_f32(h[1 + i]));
          if (!std::isinf(v)) REQUIRE(back[i] == static_cast<float>(v * 2.0));
        }
        CHECK(back_flag == any_inf);
      }
    }
  }
  float bad[3] = {1.f, std::numeric_limits<float>::quiet_NaN(), 2.f};
  std::uint16_t out[3];
  CHECK(cpu::cast_to_half(bad, out, 3, 1.f, HalfKind::BF16));
  float big[1] = {1e6f};
  CHECK(cpu::cast_to_half(big, out, 1, 1.f, HalfKind::F16));   // overflows f16
  CHECK_FALSE(cpu::cast_to_half(big, out, 1, 1.f, HalfKind::BF16));
}

namespace {

// The documented contract, spelled out as plainly as possible (see docs/kernels.md).
double contract_norm(const std::vector<std::vector<float>>& tensors) {
  std::vector<float> partials;
  for (const auto& t : tensors)
    for (std::size_t base = 0; base < t.size(); base += 4096) {
      float lane[256] = {};
      for (std::size_t j = 0; j < 16; ++j)
        for (std::size_t l = 0; l < 256; ++l)
          if (base + j * 256 + l < t.size()) lane[l] = std::fma(t[base + j * 256 + l], t[base + j * 256 + l], lane[l]);
      for (std::size_t s = 128; s > 0; s /= 2)
        for (std::size_t l = 0; l < s; ++l) lane[l] += lane[l + s];
      partials.push_back(lane[0]);
    }
  double lane[256] = {};
  for (std::size_t k = 0; k < partials.size(); ++k) lane[k % 256] += partials[k];
  for (std::size_t s = 128; s > 0; s /= 2)
    for (std::size_t l = 0; l < s; ++l) lane[l] += lane[l + s];
  return std::sqrt(lane[0]);
}

}  // namespace

TEST_CASE("multi-tensor L2 norm: close to exact, bitwise the documented order, repeatable", "[kernels][norm]") {
  std::mt19937 rng(5);
  std::vector<std::vector<float>> tensors;
  for (int i = 0; i < 2000; ++i) tensors.push_back(random_floats(rng() % 300, static_cast<unsigned>(i)));
  tensors.push_back(random_floats(3 << 20, 99));
  for (std::size_t n : kOddSizes) tensors.push_back(random_floats(n, static_cast<unsigned>(n)));
  std::vector<ConstTensorRef> refs;
  long double exact = 0;
  for (auto& t : tensors) {
    refs.push_back({t.data(), t.size()});
    for (float x : t) exact += static_cast<long double>(x) * x;
  }
  double got = cpu::l2_norm(refs.data(), refs.size(), DType::F32);
  CHECK(std::fabs(got - std::sqrt(static_cast<double>(exact))) <= 1e-5 * std::sqrt(static_cast<double>(exact)));
  CHECK(got == contract_norm(tensors));
  CHECK(got == cpu::l2_norm(refs.data(), refs.size(), DType::F32));

  // f16/bf16 inputs: the same order over the widened values.
  std::vector<std::vector<std::uint16_t>> halves;
  std::vector<std::vector<float>> widened;
  std::vector<ConstTensorRef> hrefs;
  for (std::size_t i = 0; i < 50; ++i) {
    auto f = random_floats(1 + i * 331, static_cast<unsigned>(i + 7));
    halves.emplace_back(f.size());
    widened.emplace_back(f.size());
    for (std::size_t k = 0; k < f.size(); ++k) {
      halves.back()[k] = f32_to_bf16(f[k]);
      widened.back()[k] = bf16_to_f32(halves.back()[k]);
    }
    hrefs.push_back({halves.back().data(), halves.back().size()});
  }
  CHECK(cpu::l2_norm(hrefs.data(), hrefs.size(), DType::BF16) == contract_norm(widened));
  ConstTensorRef none{nullptr, 0};
  CHECK(cpu::l2_norm(&none, 1, DType::F32) == 0.0);
}

TEST_CASE("fused AdamW matches the textbook update; bf16 master; skip on inf", "[kernels][adamw]") {
  AdamWConfig c;
  c.lr = 1e-2f;
  c.weight_decay = 0.1f;
  c.step = 3;
  c.inv_grad_scale = 0.5f;
  for (std::size_t n : kOddSizes) {
    auto p = random_floats(n, 1), g = random_floats(n, 2), m = random_floats(n, 3, 0.1f), v = random_floats(n, 4, 0.1f);
    for (auto& x : v) x = std::fabs(x);
    auto p0 = p, m0 = m, v0 = v;
    TensorRef P{p.data(), n}, M{m.data(), n}, V{v.data(), n};
    ConstTensorRef G{g.data(), n};
    cpu::adamw_f32(&P, &G, &M, &V, 1, c);
    // The hyperparameters as the float values the caller passed.
    const double b1 = 0.9f, b2 = 0.999f, lr = 1e-2f, wd = 0.1f, eps = 1e-8f;
    for (std::size_t i = 0; i < n; ++i) {
      double gi = g[i] * 0.5, mi = b1 * m0[i] + (1 - b1) * gi, vi = b2 * v0[i] + (1 - b2) * gi * gi;
      double mhat = mi / (1 - std::pow(b1, 3)), vhat = vi / (1 - std::pow(b2, 3));
      double pi = p0[i] * (1 - lr * wd) - lr * mhat / (std::sqrt(vhat) + eps);
      REQUIRE(std::fabs(m[i] - mi) <= 1e-6 * std::max(1.0, std::fabs(mi)));
      REQUIRE(std::fabs(v[i] - vi) <= 1e-6 * std::max(1e-3, std::fabs(vi)));
      REQUIRE(std::fabs(p[i] - pi) <= 2e-6 * std::max(1.0, std::fabs(pi)));
    }
    // found_inf: nothing moves.
    auto p1 = p;
    int inf = 1;
    cpu::adamw_f32(&P, &G, &M, &V, 1, c, &inf);
    CHECK(p == p1);
  }
  // bf16 params with an fp32 master: the master follows the fp32 rule, params are its rounding.
  const std::size_t n = 4097;
  auto w = random_floats(n, 5), g = random_floats(n, 6), m = std::vector<float>(n, 0.f), v = std::vector<float>(n, 0.f);
  std::vector<std::uint16_t> pb(n), gb(n);
  for (std::size_t i = 0; i < n; ++i) pb[i] = f32_to_bf16(w[i]), gb[i] = f32_to_bf16(g[i]);
  auto w_ref = w, m_ref = m, v_ref = v;
  std::vector<float> g_wide(n);
  for (std::size_t i = 0; i < n; ++i) g_wide[i] = bf16_to_f32(gb[i]);
  TensorRef Pb{pb.data(), n}, W{w.data(), n}, M{m.data(), n}, V{v.data(), n};
  ConstTensorRef Gb{gb.data(), n};
  cpu::adamw_bf16_master(&Pb, &Gb, &W, &M, &V, 1, c);
  TensorRef Wr{w_ref.data(), n}, Mr{m_ref.data(), n}, Vr{v_ref.data(), n};
  ConstTensorRef Gw{g_wide.data(), n};
  cpu::adamw_f32(&Wr, &Gw, &Mr, &Vr, 1, c);
  CHECK(w == w_ref);
  for (std::size_t i = 0; i < n; ++i) REQUIRE(pb[i] == f32_to_bf16(w[i]));
}

namespace {

// The checksum contract, plainly: 64 KiB blocks, 8-byte little-endian words zero-padded, word j
// to lane j % 256, xxHash64 rounds and merges.
std::vector<std::uint64_t> contract_digests(const unsigned char* p, std::size_t bytes) {
  std::vector<std::uint64_t> out;
  std::size_t off = 0;
  do {
    std::size_t len = std::min<std::size_t>(65536, bytes - off);
    std::uint64_t acc[256];
    for (unsigned l = 0; l < 256; ++l) acc[l] = kP5 + l;
    for (std::size_t j = 0; j * 8 < len; ++j) {
      std::uint64_t w = 0;
      for (std::size_t b = 0; b < 8; ++b)
        if (j * 8 + b < len) w |= static_cast<std::uint64_t>(p[off + j * 8 + b]) << (8 * b);
      acc[j % 256] = rotl64(acc[j % 256] + w * kP2, 31) * kP1;
    }
    std::uint64_t h = kP5 + len;
    for (unsigned l = 0; l < 256; ++l) h = (h ^ (rotl64(acc[l] * kP2, 31) * kP1)) * kP1 + kP4;
    out.push_back(avalanche(h));
    off += len;
  } while (off < bytes);
  return out;
}

}  // namespace

TEST_CASE("block checksums: the documented contract, any alignment, every bit matters", "[kernels][checksum]") {
  std::mt19937 rng(8);
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{8}, std::size_t{65535},
                        std::size_t{65536}, std::size_t{65537}, std::size_t{(1 << 20) + 3}}) {
    std::vector<unsigned char> a(n + 1);
    for (auto& b : a) b = static_cast<unsigned char>(rng());
    const unsigned char* data = a.data() + 1;  // misaligned
    auto d = cpu::block_digests(data, n);
    CHECK(d == contract_digests(data, n));
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
}
