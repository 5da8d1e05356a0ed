#pragma once
// The element-wise and small-reduction steps of the MLP's forward and backward on the GPU (the
// GEMMs are cuBLAS calls in mlp_cuda.cpp). Row-major layouts as in mlp.hpp. Every sum runs in one
// fixed order in one thread (no atomics, no split depending on the grid), so the results are the
// same bits on every run on the same GPU model. All work is enqueued on `stream`; launch errors
// throw trainrt::Error.
#include <cuda_runtime.h>

#include <cstddef>

namespace train_mlp::gpu {

// a[r][k] = max(a[r][k] + b1[k], 0) in place (NaN becomes 0, as `a > 0 ? a : 0` on the CPU).
void bias_relu(float* a, const float* b1, std::size_t rows, std::size_t hidden, cudaStream_t stream);

// From out[r] = h[r] . w2 (bias not yet added): err = out + b2 - y, dy[r] = 2 err / rows,
// loss[0] = sum(err^2) / rows, gb2[0] = sum(dy), both summed in row order. `out` is overwritten
// (scratch). One block; rows <= 1024.
void loss_and_output_grad(float* out, const float* y, const float* b2, float* dy, float* loss, float* gb2,
                          std::size_t rows, cudaStream_t stream);

// dh[r][k] = h[r][k] > 0 ? dy[r] * w2[k] : 0.
void relu_backward(const float* h, const float* dy, const float* w2, float* dh, std::size_t rows, std::size_t hidden,
                   cudaStream_t stream);

// gb1[k] = sum over r (in order) of dh[r][k].
void column_sums(const float* dh, float* gb1, std::size_t rows, std::size_t hidden, cudaStream_t stream);

}  // namespace train_mlp::gpu
