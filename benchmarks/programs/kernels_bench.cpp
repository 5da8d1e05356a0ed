// kernels-bench: bytes moved per second by each kernel next to a plain copy measured in the same run
// (GPU: cudaMemcpyAsync device-to-device on the same stream; CPU: memcpy).
//   kernels-bench [--gpu] [--cpu] [--sizes 64M,256M,1G] [--iters N]
// Default: --gpu at 64 MiB, 256 MiB and 1 GiB, 20 iterations. Every input is random (f32 in
// [-1, 1), AdamW's second moments in [0, 1), bf16 of [-1, 1)), never zeros: zeros hide unwritten
// outputs and can run faster than real data. Each GPU row is timed twice, after one untimed call
// (module load, the scratch pool's creation, occupancy queries):
//   per call  N calls back to back between two events: what a caller pays, the work each call
//             does around its kernel included (a tensor table over 64 entries uploaded, l2_norm's
//             counter memset, scratch from the stream-ordered pool);
//   kernel    the kernel launch alone, between events the kernels record right before and after
//             it (cuda::set_launch_events), summed over N calls: uploads and allocations left out.
// "moved" counts every byte read plus every byte written, for the kernels and for the copy alike
// (a copy of B bytes moves 2B):
//   pack/unpack 2B; cast f32->bf16 of n elements 4n+2n; bf16->f32 2n+4n; l2 norm: its input;
//   AdamW f32: p,g,m,v read + p,m,v written = 28 B/element; AdamW bf16+master: g(2),w,m,v read +
//   p(2),w,m,v written = 28 B/element; block digests: the input.
// Exit status: 0 measured; 1 any CUDA error (a driver mismatch included); 77 no CUDA device (or
// no CUDA driver at all): nothing measured, said on stdout.
#include <fmt/format.h>

#include <algorithm>
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

#include "common/gpu_presence.hpp"
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

// Random inputs: splitmix64, two values per draw (fast enough for 64 MiB in tens of milliseconds).
enum class Fill { F32Signed, F32Positive, Bf16Signed };
void fill_random(void* dst, std::size_t bytes, std::uint64_t seed, Fill kind) {
  std::uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  auto next = [&x] {
    std::uint64_t z = (x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  auto unit = [](std::uint32_t r, bool positive) {  // [0, 1) or [-1, 1) from 24 random bits
    const float u = static_cast<float>(r >> 8) * (1.f / 16777216.f);
    return positive ? u : 2.f * u - 1.f;
  };
  auto* out = static_cast<unsigned char*>(dst);
  if (kind == Fill::Bf16Signed) {
    for (std::size_t i = 0; i + 2 <= bytes; i += 4) {
      const std::uint64_t r = next();
      for (std::size_t k = 0; k < 2 && i + 2 * k + 2 <= bytes; ++k) {
        const float f = unit(static_cast<std::uint32_t>(r >> (32 * k)), false);
        std::uint32_t b;
        std::memcpy(&b, &f, 4);
        const std::uint16_t h = static_cast<std::uint16_t>(b >> 16);
        std::memcpy(out + i + 2 * k, &h, 2);
      }
    }
    return;
  }
  for (std::size_t i = 0; i + 4 <= bytes; i += 8) {
    const std::uint64_t r = next();
    for (std::size_t k = 0; k < 2 && i + 4 * k + 4 <= bytes; ++k) {
      const float f = unit(static_cast<std::uint32_t>(r >> (32 * k)), kind == Fill::F32Positive);
      std::memcpy(out + i + 4 * k, &f, 4);
    }
  }
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
    std::vector<float> a(n), b(n), c(n), d(n);
    fill_random(a.data(), bytes, 1, Fill::F32Signed);
    fill_random(b.data(), bytes, 2, Fill::F32Signed);
    fill_random(c.data(), bytes, 3, Fill::F32Signed);
    fill_random(d.data(), bytes, 4, Fill::F32Positive);
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

// Fills `bytes` of device memory with random data through one pinned block (each buffer repeats
// its own 64 MiB block: past the L2's size, so no row reads a repeat from the cache).
void fill_device(void* dev, std::size_t bytes, std::uint64_t seed, Fill kind) {
  const std::size_t block = std::min<std::size_t>(bytes, 64u << 20);
  void* host = nullptr;
  CK(cudaMallocHost(&host, block));
  fill_random(host, block, seed, kind);
  for (std::size_t at = 0; at < bytes; at += block)
    CK(cudaMemcpy(static_cast<unsigned char*>(dev) + at, host, std::min(block, bytes - at), cudaMemcpyHostToDevice));
  CK(cudaFreeHost(host));
}

// Clears the kernels' launch probe when a timed call throws halfway.
struct ProbeOff {
  ~ProbeOff() { cuda::set_launch_events(nullptr, nullptr); }
};

struct Timing {
  double per_call;  // seconds per call, back to back
  double kernel;    // seconds per kernel launch alone (NaN: not a kernel)
};

void gpu_row(const char* name, std::size_t bytes, double moved, Timing t, double copy_gbs) {
  const double gbs = moved / t.per_call / 1e9, kgbs = moved / t.kernel / 1e9;
  fmt::print("  {:<34} {:>11} {:>10.3f} ms {:>8.1f} GB/s {:>5.0f}% | {:>10.3f} ms {:>8.1f} GB/s {:>5.0f}%\n", name, bytes,
             t.per_call * 1e3, gbs, 100 * gbs / copy_gbs, t.kernel * 1e3, kgbs, 100 * kgbs / copy_gbs);
}

void gpu_section(const std::vector<std::size_t>& sizes, int iters) {
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  int driver = 0;
  CK(cudaDriverGetVersion(&driver));
  fmt::print("# GPU {} ({} SMs, driver {}): kernels vs cudaMemcpyAsync D2D on the same stream, {} iterations, random "
             "inputs\n", prop.name, prop.multiProcessorCount, driver, iters);
  fmt::print("  {:<34} {:>11} {:>13} {:>13} {:>6} | {:>13} {:>13} {:>6}\n", "row", "bytes", "per call", "", "%copy",
             "kernel alone", "", "%copy");
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<cudaEvent_t> before(iters), after(iters);
  for (int i = 0; i < iters; ++i) {
    CK(cudaEventCreate(&before[i]));
    CK(cudaEventCreate(&after[i]));
  }
  auto per_call = [&](const std::function<void()>& fn) {
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
  auto timed = [&](const std::function<void()>& fn) {
    Timing t{per_call(fn), 0};
    {
      ProbeOff off;
      for (int i = 0; i < iters; ++i) {
        cuda::set_launch_events(before[i], after[i]);
        fn();
      }
    }
    CK(cudaStreamSynchronize(s));
    CK(cudaGetLastError());
    for (int i = 0; i < iters; ++i) {
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, before[i], after[i]));
      t.kernel += ms / 1e3;
    }
    t.kernel /= iters;
    return t;
  };
  for (std::size_t bytes : sizes) {
    const std::size_t n = bytes / 4;
    DeviceMem a(bytes), b(bytes), c(bytes), d(bytes), h(bytes / 2), dig((bytes / kChecksumBlock + 1) * 8), out(8), flag(4);
    // Seeds by size too, so no size reruns another's data. b is random as well: AdamW's params.
    const std::uint64_t seed = bytes * 8;
    fill_device(a.p, bytes, seed + 1, Fill::F32Signed);
    fill_device(b.p, bytes, seed + 2, Fill::F32Signed);
    fill_device(c.p, bytes, seed + 3, Fill::F32Signed);
    fill_device(d.p, bytes, seed + 4, Fill::F32Positive);  // AdamW's v: second moments are never negative
    fill_device(h.p, bytes / 2, seed + 5, Fill::Bf16Signed);
    CK(cudaMemsetAsync(flag.p, 0, 4, s));
    const double copy = per_call([&] { CK(cudaMemcpyAsync(b.p, a.p, bytes, cudaMemcpyDeviceToDevice, s)); });
    const double copy_gbs = 2.0 * bytes / copy / 1e9;
    fmt::print("  {:<34} {:>11} {:>10.3f} ms {:>8.1f} GB/s   (read+write; the 100% of %copy)\n", "cudaMemcpyAsync D2D",
               bytes, copy * 1e3, copy_gbs);
    std::vector<ConstTensorRef> in;
    std::vector<TensorRef> outs;
    for (std::size_t k = 0; k < 64; ++k) {
      in.push_back({a.at<float>() + k * (n / 64), n / 64});
      outs.push_back({a.at<float>() + k * (n / 64), n / 64});
    }
    gpu_row("pack (64 tensors)", bytes, 2.0 * bytes, timed([&] { cuda::pack(in.data(), in.size(), DType::F32, b.p, s); }), copy_gbs);
    gpu_row("unpack (64 tensors)", bytes, 2.0 * bytes, timed([&] { cuda::unpack(b.p, outs.data(), outs.size(), DType::F32, s); }), copy_gbs);
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
      gpu_row(name.c_str(), packed, 2.0 * packed,
          timed([&] { cuda::pack(odd.data(), odd.size(), DType::F16, b.at(odd_bytes ? 3 : 0), s); }), copy_gbs);
    }
    gpu_row("cast f32->bf16 x scale", bytes, 6.0 * n,
        timed([&] { cuda::cast_to_half(a.at<float>(), h.at<std::uint16_t>(), n, 2.f, HalfKind::BF16, flag.at<int>(), s); }), copy_gbs);
    gpu_row("cast bf16->f32 x scale", bytes, 6.0 * n,
        timed([&] { cuda::cast_from_half(h.at<std::uint16_t>(), b.at<float>(), n, 2.f, HalfKind::BF16, flag.at<int>(), s); }), copy_gbs);
    gpu_row("l2 norm f32 (64 tensors)", bytes, bytes,
        timed([&] { cuda::l2_norm(in.data(), in.size(), DType::F32, out.at<double>(), s); }), copy_gbs);
    ConstTensorRef hb{h.p, n};  // n bf16 elements: the bytes / 2 bytes h holds
    gpu_row("l2 norm bf16 (1 tensor)", bytes / 2, bytes / 2.0,
        timed([&] { cuda::l2_norm(&hb, 1, DType::BF16, out.at<double>(), s); }), copy_gbs);
    TensorRef P{b.p, n}, M{c.p, n}, V{d.p, n};
    ConstTensorRef G{a.p, n};
    AdamWConfig cfg;
    gpu_row("adamw f32", bytes, 28.0 * n, timed([&] { cuda::adamw_f32(&P, &G, &M, &V, 1, cfg, flag.at<int>(), s); }), copy_gbs);
    // bf16 + master at n/2 elements, so every array fits the buffers: p, g in h (bf16), w, m, v.
    const std::size_t nb = n / 2;
    TensorRef Pb{h.p, nb}, W{b.p, nb}, Mb{c.p, nb}, Vb{d.p, nb};
    ConstTensorRef Gb{h.at<std::uint16_t>() + nb, nb};
    gpu_row("adamw bf16 + f32 master", nb * 4, 28.0 * nb,
        timed([&] { cuda::adamw_bf16_master(&Pb, &Gb, &W, &Mb, &Vb, 1, cfg, flag.at<int>(), s); }), copy_gbs);
    gpu_row("block digests", bytes, bytes, timed([&] { cuda::block_digests(a.p, bytes, dig.at<std::uint64_t>(), s); }), copy_gbs);
  }
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  for (int i = 0; i < iters; ++i) {
    CK(cudaEventDestroy(before[i]));
    CK(cudaEventDestroy(after[i]));
  }
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
    } else if (a == "--iters" && i + 1 < argc) {
      const std::string v = argv[++i];
      if (v.empty() || v.size() > 4 || v.find_first_not_of("0123456789") != std::string::npos || std::stoi(v) < 1) {
        fmt::print(stderr, "kernels-bench: --iters '{}' is not a whole number in 1..9999\n", v);
        return 2;
      }
      iters = std::stoi(v);
    }
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
