// Every CUDA kernel against its CPU twin, bitwise (the contracts are bitwise: docs/kernels.md).
// Exits 77 (CTest: skipped) with a message when no CUDA device is present.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <cstring>
#include <random>
#include <vector>

#include "trainrt/kernels/cpu.hpp"
#include "trainrt/kernels/cuda.hpp"
#include "random_data.hpp"
#include "trainrt/kernels/half.hpp"

using namespace trainrt;
using namespace trainrt::kernels;

namespace {

unsigned failures = 0, checks = 0;
void check(bool ok, const std::string& what) {
  ++checks;
  if (!ok) fmt::print("FAIL: {}\n", what), ++failures;
}

template <typename T>
struct DeviceBuffer {
  T* ptr = nullptr;
  std::size_t n = 0;
  explicit DeviceBuffer(std::size_t count) : n(count) { cudaMalloc(reinterpret_cast<void**>(&ptr), std::max<std::size_t>(1, n) * sizeof(T) + 16); }
  DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { cudaMemcpy(ptr, host.data(), n * sizeof(T), cudaMemcpyHostToDevice); }
  ~DeviceBuffer() { cudaFree(ptr); }
  std::vector<T> get() const {
    std::vector<T> h(n);
    cudaMemcpy(h.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost);
    return h;
  }
};


}  // namespace

int main() {
  if (!cuda::device_available()) {
    fmt::print("SKIPPED: no CUDA device on this machine; GPU kernels were compiled but not run\n");
    return 77;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  fmt::print("GPU: {}\n", prop.name);
  const std::vector<std::size_t> sizes = {0, 1, 3, 4097, 1000003};

  // pack / unpack with thousands of tiny tensors plus odd sizes
  {
    std::mt19937 rng(1);
    std::vector<std::vector<float>> host;
    for (int i = 0; i < 3000; ++i) host.push_back(trainrt::test::random_floats(rng() % 9, static_cast<unsigned>(i)));
    for (auto n : sizes) host.push_back(trainrt::test::random_floats(n, static_cast<unsigned>(n)));
    std::vector<std::unique_ptr<DeviceBuffer<float>>> dev;
    std::vector<ConstTensorRef> in;
    std::vector<ConstTensorRef> in_host;
    std::size_t total = 0;
    for (auto& h : host) {
      dev.push_back(std::make_unique<DeviceBuffer<float>>(h));
      in.push_back({dev.back()->ptr, h.size()});
      in_host.push_back({h.data(), h.size()});
      total += h.size();
    }
    DeviceBuffer<float> bucket(total);
    cuda::pack(in.data(), in.size(), DType::F32, bucket.ptr);
    std::vector<float> want(total);
    cpu::pack(in_host.data(), in_host.size(), DType::F32, want.data());
    check(bucket.get() == want, "pack");
    std::vector<std::unique_ptr<DeviceBuffer<float>>> outs;
    std::vector<TensorRef> out;
    for (auto& h : host) {
      outs.push_back(std::make_unique<DeviceBuffer<float>>(h.size()));
      out.push_back({outs.back()->ptr, h.size()});
    }
    cuda::unpack(bucket.ptr, out.data(), out.size(), DType::F32);
    bool same = true;
    for (std::size_t i = 0; i < host.size(); ++i) same &= outs[i]->get() == host[i];
    check(same, "unpack");
  }
  for (auto n : sizes) {
    auto x = trainrt::test::random_floats(n, 3, 1000.f);
    DeviceBuffer<float> dx(x);
    DeviceBuffer<std::uint16_t> dh(n);
    DeviceBuffer<int> flag(std::vector<int>{0});
    for (HalfKind kind : {HalfKind::F16, HalfKind::BF16}) {
      std::vector<std::uint16_t> want(n);
      bool want_flag = cpu::cast_to_half(x.data(), want.data(), n, 64.f, kind);
      cuda::cast_to_half(dx.ptr, dh.ptr, n, 64.f, kind, flag.ptr);
      check(dh.get() == want, fmt::format("cast_to_half n={}", n));
      check((flag.get()[0] != 0) == want_flag, fmt::format("cast_to_half flag n={}", n));
    }
    // L2 norm over many tensors
    std::vector<ConstTensorRef> host_refs{{x.data(), n}}, dev_refs{{dx.ptr, n}};
    double want = cpu::l2_norm(host_refs.data(), 1, DType::F32);
    DeviceBuffer<double> out(1);
    cuda::l2_norm(dev_refs.data(), 1, DType::F32, out.ptr);
    check(out.get()[0] == want, fmt::format("l2_norm n={}: {} vs {}", n, out.get()[0], want));
    // AdamW fp32
    auto p = trainrt::test::random_floats(n, 4), g = trainrt::test::random_floats(n, 5), m = trainrt::test::random_floats(n, 6, 0.1f), v = trainrt::test::random_floats(n, 7, 0.1f);
    for (auto& e : v) e = std::fabs(e);
    DeviceBuffer<float> dp(p), dg(g), dm(m), dv(v);
    AdamWConfig c;
    c.step = 5;
    TensorRef P{p.data(), n}, M{m.data(), n}, V{v.data(), n};
    ConstTensorRef G{g.data(), n};
    cpu::adamw_f32(&P, &G, &M, &V, 1, c);
    TensorRef dP{dp.ptr, n}, dM{dm.ptr, n}, dV{dv.ptr, n};
    ConstTensorRef dG{dg.ptr, n};
    cuda::adamw_f32(&dP, &dG, &dM, &dV, 1, c, nullptr);
    check(dp.get() == p && dm.get() == m && dv.get() == v, fmt::format("adamw_f32 n={}", n));
    // checksums
    auto bytes = n * 4;
    std::vector<std::uint64_t> want_d = cpu::block_digests(x.data(), bytes);
    DeviceBuffer<std::uint64_t> dd(want_d.size());
    cuda::block_digests(dx.ptr, bytes, dd.ptr);
    check(dd.get() == want_d, fmt::format("block_digests n={}", n));
  }
  cudaError_t err = cudaDeviceSynchronize();
  check(err == cudaSuccess, cudaGetErrorString(err));
  fmt::print("gpu kernels: {} passed, {} failed\n", checks - failures, failures);
  return failures ? 1 : 0;
}
