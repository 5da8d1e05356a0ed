// Kernels of mlp_kernels.hpp. Grid-stride loops over a grid capped at 1024 blocks: the split of
// the work between threads never changes a result, since every output element is written by one
// thread and every sum is a sequential loop in one thread.
#include <string>

#include "mlp_kernels.hpp"
#include "trainrt/error.hpp"

namespace train_mlp::gpu {
namespace {

constexpr unsigned kThreads = 256;

unsigned blocks_for(std::size_t n) {
  const std::size_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b == 0 ? 1 : b < 1024 ? b : 1024);
}

void check_launch(const char* what) {
  const cudaError_t rc = cudaGetLastError();
  if (rc != cudaSuccess)
    throw trainrt::Error(std::string("launch of ") + what + " failed: " + cudaGetErrorName(rc) + " (" +
                             cudaGetErrorString(rc) + ")",
                         "train-mlp");
}

__global__ void bias_relu_kernel(float* a, const float* b1, std::size_t rows, std::size_t hidden) {
  const std::size_t n = rows * hidden;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x) {
    const float v = a[i] + b1[i % hidden];
    a[i] = v > 0.f ? v : 0.f;
  }
}

__global__ void loss_kernel(float* out, const float* y, const float* b2, float* dy, float* loss, float* gb2,
                            std::size_t rows) {
  const float rows_f = static_cast<float>(rows);
  for (std::size_t r = threadIdx.x; r < rows; r += blockDim.x) {
    const float err = out[r] + b2[0] - y[r];
    dy[r] = 2.f * err / rows_f;
    out[r] = err * err;
  }
  __syncthreads();  // the block's global writes are visible to thread 0 after this
  if (threadIdx.x == 0) {
    float sq = 0.f, g = 0.f;
    for (std::size_t r = 0; r < rows; ++r) {
      sq += out[r];
      g += dy[r];
    }
    loss[0] = sq / rows_f;
    gb2[0] = g;
  }
}

__global__ void relu_backward_kernel(const float* h, const float* dy, const float* w2, float* dh, std::size_t rows,
                                     std::size_t hidden) {
  const std::size_t n = rows * hidden;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x)
    dh[i] = h[i] > 0.f ? dy[i / hidden] * w2[i % hidden] : 0.f;
}

__global__ void column_sums_kernel(const float* dh, float* gb1, std::size_t rows, std::size_t hidden) {
  for (std::size_t k = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; k < hidden; k += std::size_t{gridDim.x} * blockDim.x) {
    float s = 0.f;
    for (std::size_t r = 0; r < rows; ++r) s += dh[r * hidden + k];
    gb1[k] = s;
  }
}

}  // namespace

void bias_relu(float* a, const float* b1, std::size_t rows, std::size_t hidden, cudaStream_t stream) {
  bias_relu_kernel<<<blocks_for(rows * hidden), kThreads, 0, stream>>>(a, b1, rows, hidden);
  check_launch("bias_relu");
}

void loss_and_output_grad(float* out, const float* y, const float* b2, float* dy, float* loss, float* gb2,
                          std::size_t rows, cudaStream_t stream) {
  if (rows == 0 || rows > 1024) throw trainrt::Error(std::to_string(rows) + " rows: 1..1024 supported", "train-mlp");
  loss_kernel<<<1, kThreads, 0, stream>>>(out, y, b2, dy, loss, gb2, rows);
  check_launch("loss");
}

void relu_backward(const float* h, const float* dy, const float* w2, float* dh, std::size_t rows, std::size_t hidden,
                   cudaStream_t stream) {
  relu_backward_kernel<<<blocks_for(rows * hidden), kThreads, 0, stream>>>(h, dy, w2, dh, rows, hidden);
  check_launch("relu_backward");
}

void column_sums(const float* dh, float* gb1, std::size_t rows, std::size_t hidden, cudaStream_t stream) {
  column_sums_kernel<<<blocks_for(hidden), kThreads, 0, stream>>>(dh, gb1, rows, hidden);
  check_launch("column_sums");
}

}  // namespace train_mlp::gpu
