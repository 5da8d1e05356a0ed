#pragma once
// The groups of GPU kernel checks in test_gpu_math.cpp, run by test_gpu_kernels.cpp's main.
#include <cuda_runtime.h>

#include "gpu_test_util.hpp"

void test_norms(gpu_test::Tally& tally, cudaStream_t s);
void test_adamw(gpu_test::Tally& tally, cudaStream_t s);
void test_huge_tensor(gpu_test::Tally& tally, cudaStream_t s);  // more than 2^31 elements
