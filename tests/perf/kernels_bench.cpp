// kernels-bench: bytes moved per second by each kernel next to a plain copy of the same bytes,
// measured in the same run (CPU: memcpy; GPU: cudaMemcpy device-to-device).
//   kernels-bench [--cpu] [--gpu] [--min 1M] [--max 1G] [--iters N]
// "moved" counts every byte read and written (pack: read+write the payload; AdamW f32: p,g,m,v
// read + p,m,v written = 28 B/element; norm: read only; checksum: read only).
#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "trainrt/kernels/cpu.hpp"
#include "trainrt/kernels/cuda.hpp"

#ifdef TRAINRT_HAVE_CUDA_KERNELS
#include <cuda_runtime.h>
#endif

using namespace trainrt;
using namespace trainrt::kernels;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_per_call(const std::function<void()>& fn, int iters) {
  fn();
  auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) fn();
  return std::chrono::duration<double>(Clock::now() - t0).count() / iters;
}

std::size_t parse_size(const std::string& s) {
  std::size_t pos = 0;
  double v = std::stod(s, &pos);
  char u = pos < s.size() ? s[pos] : 'B';
  return static_cast<std::size_t>(v * (u == 'K' ? 1 << 10 : u == 'M' ? 1 << 20 : u == 'G' ? 1 << 30 : 1));
}

void row(const char* name, std::size_t bytes, std::size_t moved, double t, double copy_gbs) {
  double gbs = moved / t / 1e9;
  fmt::print("  {:<22} {:>10} {:>10.3f} ms {:>8.2f} GB/s {:>7.0f}% of copy\n", name, bytes, t * 1e3, gbs, 100 * gbs / copy_gbs);
}

void cpu_section(std::size_t lo, std::size_t hi, int iters) {
  fmt::print("# CPU twins (one thread) vs memcpy of the same bytes\n");
  fmt::print("  {:<22} {:>10} {:>13} {:>13}\n", "kernel", "bytes", "time", "moved/time");
  for (std::size_t bytes = lo; bytes <= hi; bytes *= 4) {
    const std::size_t n = bytes / 4;
    std::vector<float> a(n, 1.5f), b(n), c(n, 0.25f), d(n, 0.5f);
    double copy = seconds_per_call([&] { std::memcpy(b.data(), a.data(), bytes); }, iters);
    double copy_gbs = 2.0 * bytes / copy / 1e9;
    fmt::print("  {:<22} {:>10} {:>10.3f} ms {:>8.2f} GB/s\n", "memcpy", bytes, copy * 1e3, copy_gbs);
    // 64 tensors of n/64 elements: the bucket case.
    std::vector<ConstTensorRef> in;
    for (std::size_t k = 0; k < 64; ++k) in.push_back({a.data() + k * (n / 64), n / 64});
    row("pack (64 tensors)", bytes, 2 * bytes, seconds_per_call([&] { cpu::pack(in.data(), in.size(), DType::F32, b.data()); }, iters), copy_gbs);
    std::vector<std::uint16_t> h(n);
    row("cast f32->bf16 x scale", bytes, bytes + bytes / 2,
        seconds_per_call([&] { cpu::cast_to_half(a.data(), h.data(), n, 2.f, HalfKind::BF16); }, iters), copy_gbs);
    row("l2 norm (64 tensors)", bytes, bytes, seconds_per_call([&] { cpu::l2_norm(in.data(), in.size(), DType::F32); }, iters), copy_gbs);
    TensorRef P{b.data(), n}, M{c.data(), n}, V{d.data(), n};
    ConstTensorRef G{a.data(), n};
    AdamWConfig cfg;
    row("adamw f32", bytes, 7 * bytes, seconds_per_call([&] { cpu::adamw_f32(&P, &G, &M, &V, 1, cfg); }, iters), copy_gbs);
    row("checksum", bytes, bytes, seconds_per_call([&] { cpu::checksum(a.data(), bytes); }, iters), copy_gbs);
  }
}

void gpu_section(std::size_t lo, std::size_t hi, int iters) {
#ifdef TRAINRT_HAVE_CUDA_KERNELS
  if (!cuda::device_available()) {
    fmt::print("# GPU: no CUDA device on this machine; GPU figures not measured\n");
    return;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  int driver = 0;
  cudaDriverGetVersion(&driver);
  fmt::print("# GPU {} (driver API {}), kernels vs cudaMemcpy device-to-device\n", prop.name, driver);
  auto timed = [&](const std::function<void()>& fn) {
    fn();
    cudaDeviceSynchronize();
    cudaEvent_t a, b;
    cudaEventCreate(&a), cudaEventCreate(&b);
    cudaEventRecord(a);
    for (int i = 0; i < iters; ++i) fn();
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    cudaEventDestroy(a), cudaEventDestroy(b);
    return ms / 1e3 / iters;
  };
  for (std::size_t bytes = lo; bytes <= hi; bytes *= 4) {
    const std::size_t n = bytes / 4;
    float *a, *b, *c, *d;
    std::uint16_t* h;
    std::uint64_t* dig;
    double* out;
    int* flag;
    cudaMalloc(&a, bytes), cudaMalloc(&b, bytes), cudaMalloc(&c, bytes), cudaMalloc(&d, bytes);
    cudaMalloc(&h, bytes / 2), cudaMalloc(&dig, (bytes / kChecksumBlock + 1) * 8), cudaMalloc(&out, 8), cudaMalloc(&flag, 4);
    cudaMemset(a, 0, bytes), cudaMemset(c, 0, bytes), cudaMemset(d, 0, bytes), cudaMemset(flag, 0, 4);
    double copy = timed([&] { cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice); });
    double copy_gbs = 2.0 * bytes / copy / 1e9;
    fmt::print("  {:<22} {:>10} {:>10.3f} ms {:>8.2f} GB/s\n", "cudaMemcpy D2D", bytes, copy * 1e3, copy_gbs);
    std::vector<ConstTensorRef> in;
    for (std::size_t k = 0; k < 64; ++k) in.push_back({a + k * (n / 64), n / 64});
    row("pack (64 tensors)", bytes, 2 * bytes, timed([&] { cuda::pack(in.data(), in.size(), DType::F32, b); }), copy_gbs);
    row("cast f32->bf16 x scale", bytes, bytes + bytes / 2, timed([&] { cuda::cast_to_half(a, h, n, 2.f, HalfKind::BF16, flag); }), copy_gbs);
    row("l2 norm (64 tensors)", bytes, bytes, timed([&] { cuda::l2_norm(in.data(), in.size(), DType::F32, out); }), copy_gbs);
    TensorRef P{b, n}, M{c, n}, V{d, n};
    ConstTensorRef G{a, n};
    AdamWConfig cfg;
    row("adamw f32", bytes, 7 * bytes, timed([&] { cuda::adamw_f32(&P, &G, &M, &V, 1, cfg, nullptr); }), copy_gbs);
    row("block digests", bytes, bytes, timed([&] { cuda::block_digests(a, bytes, dig); }), copy_gbs);
    cudaFree(a), cudaFree(b), cudaFree(c), cudaFree(d), cudaFree(h), cudaFree(dig), cudaFree(out), cudaFree(flag);
  }
#else
  (void)lo, (void)hi, (void)iters;
  fmt::print("# GPU: built without CUDA kernels\n");
#endif
}

}  // namespace

int main(int argc, char** argv) {
  bool cpu = false, gpu = false;
  std::size_t lo = 1 << 20, hi = 256u << 20;
  int iters = 5;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--cpu") cpu = true;
    else if (a == "--gpu") gpu = true;
    else if (a == "--min" && i + 1 < argc) lo = parse_size(argv[++i]);
    else if (a == "--max" && i + 1 < argc) hi = parse_size(argv[++i]);
    else if (a == "--iters" && i + 1 < argc) iters = std::stoi(argv[++i]);
    else {
      fmt::print(stderr, "usage: kernels-bench [--cpu] [--gpu] [--min 1M] [--max 1G] [--iters N]\n");
      return 2;
    }
  }
  if (!cpu && !gpu) cpu = gpu = true;
  if (cpu) cpu_section(lo, hi, iters);
  if (gpu) gpu_section(lo, hi, iters);
  return 0;
}
