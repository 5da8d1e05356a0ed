// CPU twins of the L2 norm and AdamW against scalar references written here, step by step in the
// CUDA source's operation order (element_ops.hpp, cuda_reduce.cu), compared bitwise. This file is
// compiled like every consumer of trainrt::kernels, with -ffp-contract=off, so each line below
// rounds where it says; the sensitivity tests show the comparisons would see a fused multiply-add
// or a different reduction tree.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "random_data.hpp"
#include "trainrt/kernels/cpu.hpp"
#include "trainrt/kernels/half.hpp"

using namespace trainrt;
using namespace trainrt::kernels;
using trainrt::testing::random_floats;

namespace {

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}
std::uint64_t bits(double d) {
  std::uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
}

// The tree over 256 lane values: within each group of 32 (a warp's shfl_down strides 16..1), then
// across the 8 group heads (strides 4, 2, 1).
template <typename T>
T warp_first_tree(std::vector<T> v) {
  for (std::size_t g = 0; g < 8; ++g)
    for (std::size_t s = 16; s >= 1; s /= 2)
      for (std::size_t i = 0; i < s; ++i) v[g * 32 + i] = v[g * 32 + i] + v[g * 32 + i + s];
  for (std::size_t s = 4; s >= 1; s /= 2)
    for (std::size_t i = 0; i < s; ++i) v[i * 32] = v[i * 32] + v[(i + s) * 32];
  return v[0];
}
// The tree the kernels used before (plain halving over 256 lanes): only for the sensitivity test.
template <typename T>
T halving_tree(std::vector<T> v) {
  for (std::size_t s = 128; s >= 1; s /= 2)
    for (std::size_t i = 0; i < s; ++i) v[i] = v[i] + v[i + s];
  return v[0];
}

// The norm, element by element: element e of a chunk is slot e/4, position e%4; slot q belongs to
// lane q%256; each (lane, position) accumulator sees its elements in increasing e.
template <typename Tree>
double reference_norm(const std::vector<std::vector<float>>& tensors, Tree tree) {
  std::vector<float> partials;
  for (const auto& t : tensors)
    for (std::size_t base = 0; base < t.size(); base += 4096) {
      std::vector<float> acc(256 * 4, 0.f);  // [lane][position]
      for (std::size_t e = 0; e < 4096 && base + e < t.size(); ++e) {
        const std::size_t lane = (e / 4) % 256, pos = e % 4;
        const float x = t[base + e];
        acc[lane * 4 + pos] = std::fma(x, x, acc[lane * 4 + pos]);
      }
      std::vector<float> lanes(256);
      for (std::size_t l = 0; l < 256; ++l) {
        const float left = acc[l * 4] + acc[l * 4 + 1];
        const float right = acc[l * 4 + 2] + acc[l * 4 + 3];
        lanes[l] = left + right;
      }
      partials.push_back(tree(lanes));
    }
  std::vector<double> lanes(256, 0.0);
  for (std::size_t k = 0; k < partials.size(); ++k) lanes[k % 256] = lanes[k % 256] + static_cast<double>(partials[k]);
  return std::sqrt(tree(lanes));
}
double reference_norm(const std::vector<std::vector<float>>& tensors) {
  return reference_norm(tensors, [](auto v) { return warp_first_tree(std::move(v)); });
}

}  // namespace

TEST_CASE("multi-tensor L2 norm (f32): bitwise the reference, close to exact, repeatable", "[kernels][norm]") {
  std::mt19937 rng(5);
  std::vector<std::vector<float>> tensors;
  for (int i = 0; i < 2000; ++i) tensors.push_back(random_floats(rng() % 300, static_cast<unsigned>(i)));
  tensors.push_back(random_floats(3 << 20, 99));
  for (std::size_t n : {0, 1, 3, 4095, 4097, 8190}) tensors.push_back(random_floats(n, static_cast<unsigned>(n)));
  std::vector<ConstTensorRef> refs;
  long double exact = 0;
  for (auto& t : tensors) {
    refs.push_back({t.data(), t.size()});
    for (float x : t) exact += static_cast<long double>(x) * x;
  }
  const double got = cpu::l2_norm(refs.data(), refs.size(), DType::F32);
  CHECK(bits(got) == bits(reference_norm(tensors)));
  CHECK(std::fabs(got - std::sqrt(static_cast<double>(exact))) <= 1e-5 * std::sqrt(static_cast<double>(exact)));
  CHECK(bits(got) == bits(cpu::l2_norm(refs.data(), refs.size(), DType::F32)));
  // The comparison can tell reduction trees apart: the old halving tree gives other bits here.
  CHECK(bits(got) != bits(reference_norm(tensors, [](auto v) { return halving_tree(std::move(v)); })));

  // A misaligned f32 tensor (4 bytes off a 16-byte boundary) follows the same order.
  std::vector<float> off(10001);
  auto vals = random_floats(10000, 17);
  std::memcpy(off.data() + 1, vals.data(), vals.size() * 4);
  ConstTensorRef mis{off.data() + 1, vals.size()};
  CHECK(bits(cpu::l2_norm(&mis, 1, DType::F32)) == bits(reference_norm({vals})));

  ConstTensorRef none{nullptr, 0};
  CHECK(cpu::l2_norm(&none, 1, DType::F32) == 0.0);
  CHECK(cpu::l2_norm(nullptr, 0, DType::F32) == 0.0);
  CHECK_THROWS(cpu::l2_norm(refs.data(), 1, DType::I32));
}

TEST_CASE("multi-tensor L2 norm (f16, bf16): bitwise the reference over the widened values", "[kernels][norm]") {
  for (HalfKind kind : {HalfKind::F16, HalfKind::BF16}) {
    std::vector<std::vector<std::uint16_t>> halves;
    std::vector<std::vector<float>> widened;
    std::vector<ConstTensorRef> hrefs;
    for (std::size_t i = 0; i < 60; ++i) {
      auto f = random_floats(i == 59 ? 70001 : 1 + i * 331, static_cast<unsigned>(i + 7), 30.f);
      halves.emplace_back(f.size());
      widened.emplace_back(f.size());
      for (std::size_t k = 0; k < f.size(); ++k) {
        halves.back()[k] = kind == HalfKind::F16 ? f32_to_f16(f[k]) : f32_to_bf16(f[k]);
        widened.back()[k] = kind == HalfKind::F16 ? f16_to_f32(halves.back()[k]) : bf16_to_f32(halves.back()[k]);
      }
      hrefs.push_back({halves.back().data(), halves.back().size()});
    }
    const DType dt = kind == HalfKind::F16 ? DType::F16 : DType::BF16;
    CHECK(bits(cpu::l2_norm(hrefs.data(), hrefs.size(), dt)) == bits(reference_norm(widened)));
  }
}

namespace {

struct Hyper {
  float lr, beta1, beta2, eps, wd, inv_scale;
  int step;
};

struct Scalars {
  float omb1, omb2, decay, ibc1, ibc2;
};
// The host constants, from the documented formulas (double, then one rounding to float).
Scalars scalars_of(const Hyper& h) {
  Scalars s;
  s.omb1 = static_cast<float>(1.0 - static_cast<double>(h.beta1));
  s.omb2 = static_cast<float>(1.0 - static_cast<double>(h.beta2));
  s.decay = static_cast<float>(1.0 - static_cast<double>(h.lr) * static_cast<double>(h.wd));
  s.ibc1 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(h.beta1), static_cast<double>(h.step))));
  s.ibc2 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(h.beta2), static_cast<double>(h.step))));
  return s;
}

// One element, one rounding per line, explicit fmaf where the kernel has one. `fuse_delta`
// replaces `p - lr*step` by one fused operation: what GCC's default contraction produced.
void reference_adamw(float& p, float g, float& m, float& v, const Hyper& h, bool fuse_delta = false) {
  const Scalars s = scalars_of(h);
  const float gs = g * h.inv_scale;
  const float m_in = s.omb1 * gs;
  m = std::fma(h.beta1, m, m_in);
  const float g2 = gs * gs;
  const float v_in = s.omb2 * g2;
  v = std::fma(h.beta2, v, v_in);
  const float mhat = m * s.ibc1;
  const float vhat = v * s.ibc2;
  const float root = std::sqrt(vhat);
  const float denom = root + h.eps;
  const float ratio = mhat / denom;
  const float decayed = p * s.decay;
  if (fuse_delta) {
    p = std::fma(-h.lr, ratio, decayed);
  } else {
    const float delta = h.lr * ratio;
    p = decayed - delta;
  }
}

AdamWConfig config_of(const Hyper& h) {
  AdamWConfig c;
  c.lr = h.lr, c.beta1 = h.beta1, c.beta2 = h.beta2, c.eps = h.eps, c.weight_decay = h.wd;
  c.inv_grad_scale = h.inv_scale, c.step = h.step;
  return c;
}

}  // namespace

TEST_CASE("fused AdamW f32: bitwise the step-by-step reference, skip on inf", "[kernels][adamw]") {
  const Hyper hypers[] = {{1e-2f, 0.9f, 0.999f, 1e-8f, 0.1f, 0.5f, 3}, {3e-4f, 0.9f, 0.95f, 1e-6f, 0.01f, 1.f / 1024, 1},
                          {1e-3f, 0.8f, 0.99f, 1e-8f, 0.f, 1.f, 1000}};
  for (const Hyper& hp : hypers) {
    const AdamWConfig c = config_of(hp);
    // Several tensors of odd sizes in one call, the last one misaligned for 16-byte vectors.
    std::vector<std::vector<float>> P, G, M, V;
    for (std::size_t n : {0, 1, 3, 4097, 100003}) {
      P.push_back(random_floats(n, 1 + static_cast<unsigned>(n)));
      G.push_back(random_floats(n, 2 + static_cast<unsigned>(n), 3.f));
      M.push_back(random_floats(n, 3 + static_cast<unsigned>(n), 0.1f));
      V.push_back(random_floats(n, 4 + static_cast<unsigned>(n), 0.1f));
      for (auto& x : V.back()) x = std::fabs(x);
    }
    auto P0 = P, M0 = M, V0 = V;
    std::vector<TensorRef> pr, mr, vr;
    std::vector<ConstTensorRef> gr;
    for (std::size_t t = 0; t < P.size(); ++t) {
      const std::size_t sh = t + 1 == P.size() ? 1 : 0;
      pr.push_back({P[t].data() + sh, P[t].size() - sh});
      gr.push_back({G[t].data() + sh, G[t].size() - sh});
      mr.push_back({M[t].data() + sh, M[t].size() - sh});
      vr.push_back({V[t].data() + sh, V[t].size() - sh});
    }
    cpu::adamw_f32(pr.data(), gr.data(), mr.data(), vr.data(), pr.size(), c);
    auto Pf = P0, Mf = M0, Vf = V0;  // the fused variant, for the sensitivity check
    std::size_t fused_differs = 0;
    for (std::size_t t = 0; t < P.size(); ++t) {
      const std::size_t sh = t + 1 == P.size() ? 1 : 0;
      for (std::size_t i = sh; i < P0[t].size(); ++i) {
        reference_adamw(P0[t][i], G[t][i], M0[t][i], V0[t][i], hp);
        reference_adamw(Pf[t][i], G[t][i], Mf[t][i], Vf[t][i], hp, true);
        fused_differs += std::memcmp(&Pf[t][i], &P0[t][i], 4) != 0;
      }
      CHECK(same_bits(P[t], P0[t]));
      CHECK(same_bits(M[t], M0[t]));
      CHECK(same_bits(V[t], V0[t]));
    }
    // The comparison can see contraction: a fused `p - lr*step` differs in some elements.
    CHECK(fused_differs > 0);
    // found_inf: nothing moves.
    auto P1 = P, M1 = M, V1 = V;
    int inf = 1;
    cpu::adamw_f32(pr.data(), gr.data(), mr.data(), vr.data(), pr.size(), c, &inf);
    CHECK((P == P1 && M == M1 && V == V1));
    int fine = 0;
    cpu::adamw_f32(pr.data(), gr.data(), mr.data(), vr.data(), pr.size(), c, &fine);
    CHECK(P != P1);
  }
}

TEST_CASE("fused AdamW f32: close to the textbook update in double", "[kernels][adamw]") {
  const Hyper hp{1e-2f, 0.9f, 0.999f, 1e-8f, 0.1f, 0.5f, 3};
  const std::size_t n = 4097;
  auto p = random_floats(n, 1), g = random_floats(n, 2), m = random_floats(n, 3, 0.1f), v = random_floats(n, 4, 0.1f);
  for (auto& x : v) x = std::fabs(x);
  auto p0 = p, m0 = m, v0 = v;
  TensorRef P{p.data(), n}, M{m.data(), n}, V{v.data(), n};
  ConstTensorRef G{g.data(), n};
  cpu::adamw_f32(&P, &G, &M, &V, 1, config_of(hp));
  const double b1 = hp.beta1, b2 = hp.beta2, lr = hp.lr, wd = hp.wd, eps = hp.eps;
  for (std::size_t i = 0; i < n; ++i) {
    double gi = g[i] * 0.5, mi = b1 * m0[i] + (1 - b1) * gi, vi = b2 * v0[i] + (1 - b2) * gi * gi;
    double mhat = mi / (1 - std::pow(b1, 3)), vhat = vi / (1 - std::pow(b2, 3));
    double pi = p0[i] * (1 - lr * wd) - lr * mhat / (std::sqrt(vhat) + eps);
    REQUIRE(std::fabs(m[i] - mi) <= 1e-6 * std::max(1.0, std::fabs(mi)));
    REQUIRE(std::fabs(v[i] - vi) <= 1e-6 * std::max(1e-3, std::fabs(vi)));
    REQUIRE(std::fabs(p[i] - pi) <= 2e-6 * std::max(1.0, std::fabs(pi)));
  }
}

TEST_CASE("fused AdamW bf16 + f32 master: bitwise the reference, params are RNE(master)", "[kernels][adamw]") {
  const Hyper hp{1e-2f, 0.9f, 0.999f, 1e-8f, 0.1f, 1.f / 256, 7};
  for (std::size_t n : {0, 1, 5, 4097, 65539}) {
    auto w = random_floats(n, 5), gf = random_floats(n, 6, 300.f), m = random_floats(n, 7, 0.1f), v = random_floats(n, 8, 0.1f);
    for (auto& x : v) x = std::fabs(x);
    std::vector<std::uint16_t> pb(n, 0xdead), gb(n);
    for (std::size_t i = 0; i < n; ++i) gb[i] = f32_to_bf16(gf[i]);
    auto w0 = w, m0 = m, v0 = v;
    TensorRef Pb{pb.data(), n}, W{w.data(), n}, M{m.data(), n}, V{v.data(), n};
    ConstTensorRef Gb{gb.data(), n};
    cpu::adamw_bf16_master(&Pb, &Gb, &W, &M, &V, 1, config_of(hp));
    std::vector<std::uint16_t> pb0(n);
    for (std::size_t i = 0; i < n; ++i) {
      std::uint32_t gbits = static_cast<std::uint32_t>(gb[i]) << 16;  // widening a bf16 is exact
      float g;
      std::memcpy(&g, &gbits, 4);
      reference_adamw(w0[i], g, m0[i], v0[i], hp);
      std::uint32_t u;
      std::memcpy(&u, &w0[i], 4);
      pb0[i] = static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);  // RNE, finite inputs
    }
    CHECK(same_bits(w, w0));
    CHECK(same_bits(m, m0));
    CHECK(same_bits(v, v0));
    CHECK(same_bits(pb, pb0));
    int inf = 1;
    const auto pb1 = pb;
    const auto w1 = w;
    cpu::adamw_bf16_master(&Pb, &Gb, &W, &M, &V, 1, config_of(hp), &inf);
    CHECK((pb == pb1 && w == w1));
  }
}
