// GPU norm and AdamW against the CPU twins, bitwise; a tensor of more than 2^31 elements.
#include <memory>
#include <random>

#include "random_data.hpp"
#include "test_gpu_groups.hpp"
#include "trainrt/kernels/cpu.hpp"
#include "trainrt/kernels/cuda.hpp"
#include "trainrt/kernels/half.hpp"

using namespace trainrt;
using namespace trainrt::kernels;
using namespace gpu_test;
using trainrt::testing::random_floats;

namespace {

// Host tensors mirrored on the device, tensor i starting `shift(i)` elements past a 16-byte
// boundary (shifts make vector paths fall back to scalar heads or whole scalar tensors).
template <typename T>
class DeviceList {
 public:
  DeviceList(const std::vector<std::vector<T>>& host, std::size_t shift_every_odd, cudaStream_t s) {
    std::size_t run = 0;
    for (std::size_t i = 0; i < host.size(); ++i) {
      run = (run + 15) / 16 * 16 + (i % 2 ? shift_every_odd : 0) * sizeof(T);
      offsets_.push_back(run);
      sizes_.push_back(host[i].size());
      run += host[i].size() * sizeof(T);
    }
    mem_ = std::make_unique<DeviceBytes>(run);
    for (std::size_t i = 0; i < host.size(); ++i) upload(ptr(i), host[i], s);
  }
  T* ptr(std::size_t i) const { return mem_->at<T>(offsets_[i]); }
  std::vector<std::vector<T>> get(cudaStream_t s) const {
    std::vector<std::vector<T>> out;
    for (std::size_t i = 0; i < sizes_.size(); ++i) out.push_back(download(ptr(i), sizes_[i], s));
    return out;
  }
  std::vector<TensorRef> refs() const {
    std::vector<TensorRef> r;
    for (std::size_t i = 0; i < sizes_.size(); ++i) r.push_back({ptr(i), sizes_[i]});
    return r;
  }

 private:
  std::vector<std::size_t> offsets_, sizes_;
  std::unique_ptr<DeviceBytes> mem_;
};

template <typename T>
std::vector<TensorRef> host_refs(std::vector<std::vector<T>>& h) {
  std::vector<TensorRef> r;
  for (auto& t : h) r.push_back({t.data(), t.size()});
  return r;
}
template <typename R>
std::vector<ConstTensorRef> const_refs(const std::vector<R>& refs) {
  std::vector<ConstTensorRef> r;
  for (const auto& t : refs) r.push_back({t.data, t.count});
  return r;
}
template <typename T>
bool same_lists(const std::vector<std::vector<T>>& a, const std::vector<std::vector<T>>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!same_bits(a[i], b[i])) return false;
  return true;
}

std::uint64_t bits(double d) {
  std::uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
}

template <typename T>
void norm_case(Tally& tally, cudaStream_t s, const std::string& name, DType dt, std::vector<std::vector<T>> host,
               std::size_t shift) {
  DeviceList<T> dev(host, shift, s);
  const auto want = cpu::l2_norm(const_refs(host_refs(host)).data(), host.size(), dt);
  DeviceBytes out(8);
  double got[2];
  for (double& g : got) {
    cuda::l2_norm(const_refs(dev.refs()).data(), host.size(), dt, out.at<double>(0), s);
    g = download(out.at<double>(0), 1, s)[0];
  }
  tally.expect(bits(got[0]) == bits(want), fmt::format("l2_norm {}: {:.17g} vs CPU {:.17g}", name, got[0], want));
  tally.expect(bits(got[0]) == bits(got[1]), "l2_norm " + name + " repeats bitwise");
}

template <typename T>
std::vector<std::vector<T>> half_tensors(const std::vector<std::vector<float>>& f, bool f16) {
  std::vector<std::vector<T>> out;
  for (const auto& t : f) {
    out.emplace_back(t.size());
    for (std::size_t i = 0; i < t.size(); ++i) out.back()[i] = f16 ? f32_to_f16(t[i]) : f32_to_bf16(t[i]);
  }
  return out;
}

std::vector<std::vector<float>> floats(const std::vector<std::size_t>& sizes, unsigned seed, float scale) {
  std::vector<std::vector<float>> out;
  for (std::size_t i = 0; i < sizes.size(); ++i) out.push_back(random_floats(sizes[i], seed + static_cast<unsigned>(i), scale));
  return out;
}

}  // namespace

void test_norms(Tally& tally, cudaStream_t s) {
  std::mt19937 rng(5);
  std::vector<std::size_t> sizes;
  for (int i = 0; i < 2000; ++i) sizes.push_back(rng() % 300);
  for (std::size_t n : {0, 1, 3, 4095, 4097, 8190, 3 << 20}) sizes.push_back(n);
  const auto f = floats(sizes, 1, 1.f);
  norm_case<float>(tally, s, "f32, 2007 tensors, aligned", DType::F32, f, 0);
  norm_case<float>(tally, s, "f32, 2007 tensors, odd ones +1 element", DType::F32, f, 1);
  norm_case<std::uint16_t>(tally, s, "f16, 2007 tensors", DType::F16, half_tensors<std::uint16_t>(f, true), 0);
  norm_case<std::uint16_t>(tally, s, "bf16, 2007 tensors, odd ones +1 element", DType::BF16, half_tensors<std::uint16_t>(f, false), 1);
  norm_case<std::uint16_t>(tally, s, "f16, odd ones +3 elements", DType::F16, half_tensors<std::uint16_t>(floats({5000, 70001, 9}, 9, 20.f), true), 3);
  // 64 Mi elements: 16384 chunks, many per block of the grid.
  norm_case<float>(tally, s, "one 256 MiB f32 tensor", DType::F32, floats({std::size_t{1} << 26}, 3, 1.f), 0);
  // The descriptor table's edge (64 travel in the launch's parameters, 65 are uploaded), and an
  // uploaded table with 4,900 chunks: the last block's 16-partial batches and their remainder.
  norm_case<float>(tally, s, "f32, 64 tensors (inline table)", DType::F32, floats(std::vector<std::size_t>(64, 5000), 4, 1.f), 0);
  norm_case<float>(tally, s, "f32, 65 tensors (uploaded table)", DType::F32, floats(std::vector<std::size_t>(65, 5000), 5, 1.f), 1);
  norm_case<std::uint16_t>(tally, s, "bf16, 100 tensors of 49 chunks", DType::BF16,
                           half_tensors<std::uint16_t>(floats(std::vector<std::size_t>(100, 200000), 6, 1.f), false), 0);
  norm_case<float>(tally, s, "no tensors", DType::F32, {}, 0);
  norm_case<float>(tally, s, "only empty tensors", DType::F32, {{}, {}}, 0);
}

namespace {

struct AdamCase {
  std::vector<std::size_t> sizes;
  std::size_t shift_p, shift_m;  // element shifts of odd tensors: equal = common head, unequal = scalar
};

void adamw_f32_case(Tally& tally, cudaStream_t s, const std::string& name, const AdamCase& c) {
  auto p = floats(c.sizes, 10, 1.f), g = floats(c.sizes, 20, 3.f), m = floats(c.sizes, 30, 0.1f), v = floats(c.sizes, 40, 0.1f);
  for (auto& t : v)
    for (auto& x : t) x = std::fabs(x);
  DeviceList<float> dp(p, c.shift_p, s), dg(g, c.shift_p, s), dm(m, c.shift_m, s), dv(v, c.shift_p, s);
  DeviceBytes flag(4);
  AdamWConfig cfg;
  cfg.lr = 1e-2f, cfg.weight_decay = 0.1f, cfg.inv_grad_scale = 0.5f;
  auto P = host_refs(p), M = host_refs(m), V = host_refs(v);
  auto G = const_refs(host_refs(g));
  auto dP = dp.refs(), dM = dm.refs(), dV = dv.refs();
  auto dG = const_refs(dg.refs());
  for (int step = 1; step <= 3; ++step) {
    cfg.step = step;
    const int skip = step == 2;  // step 2: found_inf set, nothing may move on either side
    upload(flag.at<int>(0), std::vector<int>{skip}, s);
    cpu::adamw_f32(P.data(), G.data(), M.data(), V.data(), P.size(), cfg, &skip);
    cuda::adamw_f32(dP.data(), dG.data(), dM.data(), dV.data(), dP.size(), cfg, flag.at<int>(0), s);
    const bool same = same_lists(dp.get(s), p) && same_lists(dm.get(s), m) && same_lists(dv.get(s), v);
    tally.expect(same, fmt::format("adamw_f32 {} step {}{}", name, step, skip ? " (found_inf: skipped)" : ""));
  }
}

void adamw_bf16_case(Tally& tally, cudaStream_t s, const std::string& name, const AdamCase& c) {
  auto w = floats(c.sizes, 11, 1.f), m = floats(c.sizes, 31, 0.1f), v = floats(c.sizes, 41, 0.1f);
  for (auto& t : v)
    for (auto& x : t) x = std::fabs(x);
  auto pb = half_tensors<std::uint16_t>(w, false), gb = half_tensors<std::uint16_t>(floats(c.sizes, 21, 300.f), false);
  DeviceList<std::uint16_t> dp(pb, c.shift_p, s), dg(gb, c.shift_p, s);
  DeviceList<float> dw(w, c.shift_p, s), dm(m, c.shift_m, s), dv(v, c.shift_p, s);
  DeviceBytes flag(4);
  AdamWConfig cfg;
  cfg.inv_grad_scale = 1.f / 256;
  auto P = host_refs(pb), W = host_refs(w), M = host_refs(m), V = host_refs(v);
  auto G = const_refs(host_refs(gb));
  auto dP = dp.refs(), dW = dw.refs(), dM = dm.refs(), dV = dv.refs();
  auto dG = const_refs(dg.refs());
  for (int step = 1; step <= 3; ++step) {
    cfg.step = step;
    const int skip = step == 2;
    upload(flag.at<int>(0), std::vector<int>{skip}, s);
    cpu::adamw_bf16_master(P.data(), G.data(), W.data(), M.data(), V.data(), P.size(), cfg, &skip);
    cuda::adamw_bf16_master(dP.data(), dG.data(), dW.data(), dM.data(), dV.data(), dP.size(), cfg, flag.at<int>(0), s);
    const bool same = same_lists(dp.get(s), pb) && same_lists(dw.get(s), w) && same_lists(dm.get(s), m) &&
                      same_lists(dv.get(s), v);
    tally.expect(same, fmt::format("adamw_bf16_master {} step {}{}", name, step, skip ? " (found_inf: skipped)" : ""));
  }
}

}  // namespace

void test_adamw(Tally& tally, cudaStream_t s) {
  std::mt19937 rng(7);
  std::vector<std::size_t> many;  // more than the 48 inline descriptors: the uploaded table
  for (int i = 0; i < 100; ++i) many.push_back(rng() % 20000);
  const std::vector<std::size_t> few = {0, 1, 3, 4097, 100003};
  for (const auto& [name, c] : std::vector<std::pair<std::string, AdamCase>>{
           {"few, aligned", {few, 0, 0}},
           {"few, odd ones +1 element (common head)", {few, 1, 1}},
           {"few, odd ones with m out of phase (scalar)", {few, 1, 2}},
           {"100 tensors", {many, 3, 3}},
           {"one 40M-element tensor (several grids' worth)", {{40000003}, 0, 0}}}) {
    adamw_f32_case(tally, s, name, c);
    adamw_bf16_case(tally, s, name, c);
  }
}

void test_huge_tensor(Tally& tally, cudaStream_t s) {
  // 2^31 + 4099 bf16 elements (4 GiB + 8 KiB): every index and count must be 64-bit.
  const std::size_t n = (std::size_t{1} << 31) + 4099;
  std::vector<std::uint16_t> host(n);
  std::uint32_t x = 12345;
  for (auto& h : host) {
    x = x * 1664525u + 1013904223u;
    h = static_cast<std::uint16_t>(0x3c00u + ((x >> 16) & 0x3ffu) + ((x >> 26) & 1u) * 0x8000u);  // finite, either sign
  }
  DeviceBytes src(n * 2), bucket(n * 2);
  upload(src.at<std::uint16_t>(0), host, s);
  ConstTensorRef h_ref{host.data(), n}, d_ref{src.at(0), n};
  DeviceBytes out(8);
  cuda::l2_norm(&d_ref, 1, DType::BF16, out.at<double>(0), s);
  const double got = download(out.at<double>(0), 1, s)[0], want = cpu::l2_norm(&h_ref, 1, DType::BF16);
  tally.expect(bits(got) == bits(want), fmt::format("l2_norm bf16 over 2^31+4099 elements: {:.17g} vs CPU {:.17g}", got, want));
  cuda::pack(&d_ref, 1, DType::BF16, bucket.at(0), s);
  const std::vector<std::uint64_t> want_d = cpu::block_digests(host.data(), n * 2);
  DeviceBytes dig(want_d.size() * 8);
  cuda::block_digests(bucket.at(0), n * 2, dig.at<std::uint64_t>(0), s);
  tally.expect(download(dig.at<std::uint64_t>(0), want_d.size(), s) == want_d,
               "pack + block_digests of a 2^31+4099-element bf16 tensor equal the CPU digests of the source");
}
