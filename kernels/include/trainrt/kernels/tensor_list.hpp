#pragma once
// Many tensors in one call: a model with thousands of small tensors costs a few launches (GPU) or
// one pass (CPU), not thousands.
#include <cstddef>
#include <cstdint>

namespace trainrt::kernels {

struct TensorRef {
  void* data;
  std::size_t count;  // elements
};

struct ConstTensorRef {
  const void* data;
  std::size_t count;
};

enum class HalfKind : std::uint8_t { F16, BF16 };

struct AdamWConfig {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.01f;
  int step = 1;                // 1-based, after incrementing for this update
  float inv_grad_scale = 1.f;  // gradients are multiplied by this (loss-scale undo)
};

// Block size of the checksum contract (trainrt-block64 v1): 64 KiB.
constexpr std::size_t kChecksumBlock = 64 * 1024;
// Chunk of the L2-norm contract: 4096 elements, 256 lanes.
constexpr std::size_t kNormChunk = 4096;
constexpr unsigned kLanes = 256;

}  // namespace trainrt::kernels
