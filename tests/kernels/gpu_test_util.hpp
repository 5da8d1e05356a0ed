#pragma once
// Helpers of the GPU kernel tests: every CUDA call checked (a failure throws and fails the test),
// device memory with slack for views at any byte offset, bitwise comparisons, a tally.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace gpu_test {

struct CudaFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline void ck(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess)
    throw CudaFailure(fmt::format("{}: {} ({})", what, cudaGetErrorName(rc), cudaGetErrorString(rc)));
}
#define CK(call) ::gpu_test::ck((call), #call)

// `bytes` of device memory plus 64 bytes of slack, so a view may start up to 64 bytes in.
class DeviceBytes {
 public:
  explicit DeviceBytes(std::size_t bytes) { CK(cudaMalloc(&p_, bytes + 64)); }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  ~DeviceBytes() { (void)cudaFree(p_); }  // cannot throw here; the next checked call reports errors
  template <typename T = unsigned char>
  T* at(std::size_t byte_offset) const {
    return reinterpret_cast<T*>(static_cast<unsigned char*>(p_) + byte_offset);
  }

 private:
  void* p_ = nullptr;
};

template <typename T>
void upload(T* dst, const std::vector<T>& src, cudaStream_t s) {
  if (!src.empty()) CK(cudaMemcpyAsync(dst, src.data(), src.size() * sizeof(T), cudaMemcpyHostToDevice, s));
}

template <typename T>
std::vector<T> download(const T* src, std::size_t n, cudaStream_t s) {
  std::vector<T> h(n);
  if (n) CK(cudaMemcpyAsync(h.data(), src, n * sizeof(T), cudaMemcpyDeviceToHost, s));
  CK(cudaStreamSynchronize(s));
  return h;
}

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// Bitwise, except that a NaN equals any NaN: NaN payloads are outside the contract (x86 and CUDA
// produce different default NaNs for, e.g., NaN * scale).
inline bool same_floats(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    if (std::memcmp(&a[i], &b[i], 4) != 0) return false;
  }
  return true;
}

struct Tally {
  unsigned checks = 0, failures = 0;
  void expect(bool ok, const std::string& what) {
    ++checks;
    fmt::print("{} {}\n", ok ? "ok  " : "FAIL", what);
    if (!ok) ++failures;
  }
};

}  // namespace gpu_test
