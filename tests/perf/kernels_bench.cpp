// kernels-bench: bytes moved per second by each kernel next to a plain copy measured in the same run
// (GPU: cudaMemcpyAsync device-to-device on the same stream; CPU: memcpy).
//   kernels-bench [--gpu] [--cpu] [--sizes 64M,256M,1G] [--iters N]
// Default: --gpu at 64 MiB, 256 MiB and 1 GiB. "moved" counts every byte read plus every byte
// written, for the kernels and for the copy alike (a copy of B bytes moves 2B):
//   pack/unpack 2B; cast f32->bf16 of n elements 4n+2n; bf16->f32 2n+4n; l2 norm: its input;
//   AdamW f32: p,g,m,v read + p,m,v written = 28 B/element; AdamW bf16+master: g(2),w,m,v read +
//   p(2),w,m,v written = 28 B/element; block digests: the input.
// Exit status: 0 measured; 1 any CUDA error (a driver mismatch included); 77 no CUDA device (or
// no CUDA driver at all): nothing measured, said on stdout.
#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "trainrt/kernels/cpu.hpp"
#include "trainrt/kernels/cuda.hpp"

#ifdef TRAINRT_HAVE_CUDA_KERNELS
#include <cuda_runtime.h>

#include "../common/gpu_presence.hpp"
#endif

using namespace trainrt;
using namespace trainrt::kernels;
using Clock = std::chrono::steady_clock;

namespace {

std::size_t parse_size(const std::string& s) {
  std::size_t pos = 0;
  const double v = std::stod(s, &pos);
  const char u = pos < s.size() ? s[pos] : 'B';
  return static_cast<std::size_t>(v * (u == 'K' ? 1 << 10 : u == 'M' ? 1 << 20 : u == 'G' ? 1 << 30 : 1));
}

void row(const char* name, std::size_t bytes, double moved, double t, double copy_gbs) {
  const double gbs = moved / t / 1e9;
  fmt::print("  {:<34} {:>11} {:>10.3f} ms {:>8.1f} GB/s {:>6.0f}% of copy\n", name, bytes, t * 1e3, gbs, 100 * gbs / copy_gbs);
}

void cpu_section(const std::vector<std::size_t>& sizes, int iters) {
  fmt::print("# CPU twins (one thread) vs memcpy of the same bytes\n");
  auto seconds_per_call = [iters](const std::function<void()>& fn) {
    fn();
    const auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) fn();
    return std::chrono::duration<double>(Clock::now() - t0).count() / iters;
  };
  for (std::size_t bytes : sizes) {
    const std::size_t n = bytes / 4;
    std::vector<float> a(n, 1.5f), b(n), c(n, 0.25f), d(n, 0.5f);
    const double copy = seconds_per_call([&] { std::memcpy(b.data(), a.data(), bytes); });
    const double copy_gbs = 2.0 * bytes / copy / 1e9;
    fmt::print("  {:<34} {:>11} {:>10.3f} ms {:>8.1f} GB/s\n", "memcpy", bytes, copy * 1e3, copy_gbs);
    std::vector<ConstTensorRef> in;
    for (std::size_t k = 0; k < 64; ++k) in.push_back({a.data() + k * (n / 64), n / 64});
    row("pack (64 tensors)", bytes, 2.0 * bytes, seconds_per_call([&] { cpu::pack(in.data(), in.size(), DType::F32, b.data()); }), copy_gbs);
    std::vector<std::uint16_t> h(n);
    row("cast f32->bf16 x scale", bytes, 6.0 * n,
        seconds_per_call([&] { cpu::cast_to_half(a.data(), h.data(), n, 2.f, HalfKind::BF16); }), copy_gbs);
    row("l2 norm f32 (64 tensors)", bytes, bytes, seconds_per_call([&] { cpu::l2_norm(in.data(), in.size(), DType::F32); }), copy_gbs);
    TensorRef P{b.data(), n}, M{c.data(), n}, V{d.data(), n};
    ConstTensorRef G{a.data(), n};
    AdamWConfig cfg;
    row("adamw f32", bytes, 28.0 * n, seconds_per_call([&] { cpu::adamw_f32(&P, &G, &M, &V, 1, cfg); }), copy_gbs);
    row("checksum", bytes, bytes, seconds_per_call([&] { cpu::checksum(a.data(), bytes); }), copy_gbs);
  }
}

#ifdef TRAINRT_HAVE_CUDA_KERNELS
struct CudaError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
void ck(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) throw CudaError(fmt::format("{}: {} ({})", what, cudaGetErrorName(rc), cudaGetErrorString(rc)));
}
#define CK(call) ck((call), #call)

struct DeviceMem {
  void* p = nullptr;
  explicit DeviceMem(std::size_t bytes) { CK(cudaMalloc(&p, bytes + 64)); }
  ~DeviceMem() { (void)cudaFree(p); }
  template <typename T = unsigned char>
  T* at(std::size_t off = 0) const { return reinterpret_cast<T*>(static_cast<unsigned char*>(p) + off); }
};

void gpu_section(const std::vector<std::size_t>& sizes, int iters) {
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  int driver = 0;
  CK(cudaDriverGetVersion(&driver));
  fmt::print("# GPU {} ({} SMs, driver {}): kernels vs cudaMemcpyAsync D2D on the same stream, {} iterations\n", prop.name,
             prop.multiProcessorCount, driver, iters);
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  auto timed = [&](const std::function<void()>& fn) {
    fn();
    CK(cudaStreamSynchronize(s));
    CK(cudaEventRecord(e0, s));
    for (int i = 0; i < iters; ++i) fn();
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    CK(cudaGetLastError());
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    return ms / 1e3 / iters;
  };
  for (std::size_t bytes : sizes) {
    const std::size_t n = bytes / 4;
    DeviceMem a(bytes), b(bytes), c(bytes), d(bytes), h(bytes / 2), dig((bytes / kChecksumBlock + 1) * 8), out(8), flag(4);
    CK(cudaMemsetAsync(a.p, 0, bytes, s));
    CK(cudaMemsetAsync(c.p, 0, bytes, s));
    CK(cudaMemsetAsync(d.p, 0, bytes, s));
    CK(cudaMemsetAsync(h.p, 0, bytes / 2, s));
    CK(cudaMemsetAsync(flag.p, 0, 4, s));
    const double copy = timed([&] { CK(cudaMemcpyAsync(b.p, a.p, bytes, cudaMemcpyDeviceToDevice, s)); });
    const double copy_gbs = 2.0 * bytes / copy / 1e9;
    fmt::print("  {:<34} {:>11} {:>10.3f} ms {:>8.1f} GB/s   (read+write)\n", "cudaMemcpyAsync D2D", bytes, copy * 1e3, copy_gbs);
    std::vector<ConstTensorRef> in;
    std::vector<TensorRef> outs;
    for (std::size_t k = 0; k < 64; ++k) {
      in.push_back({a.at<float>() + k * (n / 64), n / 64});
      outs.push_back({a.at<float>() + k * (n / 64), n / 64});
    }
    row("pack (64 tensors)", bytes, 2.0 * bytes, timed([&] { cuda::pack(in.data(), in.size(), DType::F32, b.p, s); }), copy_gbs);
    row("unpack (64 tensors)", bytes, 2.0 * bytes, timed([&] { cuda::unpack(b.p, outs.data(), outs.size(), DType::F32, s); }), copy_gbs);
    // 3000 f16 tensors of odd element counts. Two layouts: each at an odd BYTE offset (only a byte
    // copier can pack those; the bucket at +3), and each at an odd ELEMENT offset (2 bytes past a
    // 16-byte line), the layout the PyTorch peer's torch.cat row packs, so those two rows compare.
    for (const bool odd_bytes : {true, false}) {
      std::mt19937 rng(1);
      std::vector<ConstTensorRef> odd;
      std::size_t at = 0, packed = 0;
      const std::size_t mean = bytes / 2 / 3000;
      while (odd.size() < 3000) {
        const std::size_t count = (mean / 2 + rng() % mean) | 1;
        const std::size_t off = (at + 15) / 16 * 16 + (odd_bytes ? 1 + 2 * (rng() % 7) : 2);
        if (off + 2 * count > bytes) break;
        odd.push_back({c.at(off), count});
        at = off + 2 * count;
        packed += 2 * count;
      }
      const std::string name = fmt::format("pack ({} odd f16 tensors, {})", odd.size(),
                                           odd_bytes ? "odd bytes" : "odd elements");
      row(name.c_str(), packed, 2.0 * packed,
          timed([&] { cuda::pack(odd.data(), odd.size(), DType::F16, b.at(odd_bytes ? 3 : 0), s); }), copy_gbs);
    }
    row("cast f32->bf16 x scale", bytes, 6.0 * n,
        timed([&] { cuda::cast_to_half(a.at<float>(), h.at<std::uint16_t>(), n, 2.f, HalfKind::BF16, flag.at<int>(), s); }), copy_gbs);
    row("cast bf16->f32 x scale", bytes, 6.0 * n,
        timed([&] { cuda::cast_from_half(h.at<std::uint16_t>(), b.at<float>(), n, 2.f, HalfKind::BF16, flag.at<int>(), s); }), copy_gbs);
    row("l2 norm f32 (64 tensors)", bytes, bytes,
        timed([&] { cuda::l2_norm(in.data(), in.size(), DType::F32, out.at<double>(), s); }), copy_gbs);
    ConstTensorRef hb{h.p, n};  // n bf16 elements: the bytes / 2 bytes h holds
    row("l2 norm bf16 (1 tensor)", bytes / 2, bytes / 2.0,
        timed([&] { cuda::l2_norm(&hb, 1, DType::BF16, out.at<double>(), s); }), copy_gbs);
    TensorRef P{b.p, n}, M{c.p, n}, V{d.p, n};
    ConstTensorRef G{a.p, n};
    AdamWConfig cfg;
    row("adamw f32", bytes, 28.0 * n, timed([&] { cuda::adamw_f32(&P, &G, &M, &V, 1, cfg, flag.at<int>(), s); }), copy_gbs);
    // bf16 + master at n/2 elements, so every array fits the buffers: p, g in h (bf16), w, m, v.
    const std::size_t nb = n / 2;
    TensorRef Pb{h.p, nb}, W{b.p, nb}, Mb{c.p, nb}, Vb{d.p, nb};
    ConstTensorRef Gb{h.at<std::uint16_t>() + nb, nb};
    row("adamw bf16 + f32 master", nb * 4, 28.0 * nb,
        timed([&] { cuda::adamw_bf16_master(&Pb, &Gb, &W, &Mb, &Vb, 1, cfg, flag.at<int>(), s); }), copy_gbs);
    row("block digests", bytes, bytes, timed([&] { cuda::block_digests(a.p, bytes, dig.at<std::uint64_t>(), s); }), copy_gbs);
  }
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  CK(cudaStreamDestroy(s));
}

#endif

}  // namespace

int main(int argc, char** argv) {
  bool cpu = false, gpu = false;
  std::vector<std::size_t> sizes;
  int iters = 20;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--cpu") cpu = true;
    else if (a == "--gpu") gpu = true;
    else if (a == "--sizes" && i + 1 < argc) {
      std::stringstream list(argv[++i]);
      for (std::string item; std::getline(list, item, ',');) sizes.push_back(parse_size(item));
    } else if (a == "--iters" && i + 1 < argc) iters = std::stoi(argv[++i]);
    else {
      fmt::print(stderr, "usage: kernels-bench [--gpu] [--cpu] [--sizes 64M,256M,1G] [--iters N]\n");
      return 2;
    }
  }
  if (!cpu && !gpu) gpu = true;
  if (sizes.empty()) sizes = {64u << 20, 256u << 20, std::size_t{1} << 30};
  if (cpu) cpu_section(sizes, std::max(1, iters / 4));
  if (!gpu) return 0;
#ifdef TRAINRT_HAVE_CUDA_KERNELS
  try {
    if (const int rc = testing::bench_gpu_presence_exit_code("the GPU kernels"); rc >= 0) return rc;
    gpu_section(sizes, iters);
  } catch (const std::exception& e) {
    fmt::print(stderr, "kernels-bench: FAILED: {}\n", e.what());
    return 1;
  }
  return 0;
#else
  fmt::print("# GPU: this build has no CUDA kernels (configure with CUDA); nothing measured\n");
  return 77;
#endif
}
