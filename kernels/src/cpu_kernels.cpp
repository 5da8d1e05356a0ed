// CPU twins of the CUDA kernels. Loops are written so GCC vectorises them (-O3, FMA where the
// target has it); the arithmetic is element_ops.hpp's, shared with the device code.
#include <xxhash.h>

#include <cmath>
#include <cstring>

#include "trainrt/kernels/cpu.hpp"
#include "trainrt/kernels/element_ops.hpp"

namespace trainrt::kernels::cpu {
namespace {

int norm_tag(DType t) { return t == DType::F16 ? 1 : t == DType::BF16 ? 2 : 0; }

template <typename Load>
float chunk_sum_of_squares(Load load, std::size_t base, std::size_t count) {
  float acc[kLanes] = {};
  constexpr std::size_t per_lane = kNormChunk / kLanes;
  if (base + kNormChunk <= count) {
    for (std::size_t j = 0; j < per_lane; ++j)
      for (unsigned l = 0; l < kLanes; ++l) {
        const float x = load(base + j * kLanes + l);
        acc[l] = std::fma(x, x, acc[l]);
      }
  } else {
    for (std::size_t j = 0; j < per_lane; ++j)
      for (unsigned l = 0; l < kLanes; ++l) {
        const std::size_t idx = base + j * kLanes + l;
        if (idx < count) {
          const float x = load(idx);
          acc[l] = std::fma(x, x, acc[l]);
        }
      }
  }
  for (unsigned s = kLanes / 2; s > 0; s /= 2)
    for (unsigned l = 0; l < s; ++l) acc[l] = acc[l] + acc[l + s];
  return acc[0];
}

}  // namespace

void pack(const ConstTensorRef* tensors, std::size_t n, DType dtype, void* bucket) {
  auto* out = static_cast<unsigned char*>(bucket);
  const std::size_t es = size_of(dtype);
  for (std::size_t i = 0; i < n; ++i) {
    std::memcpy(out, tensors[i].data, tensors[i].count * es);
    out += tensors[i].count * es;
  }
}

void unpack(const void* bucket, const TensorRef* tensors, std::size_t n, DType dtype) {
  const auto* in = static_cast<const unsigned char*>(bucket);
  const std::size_t es = size_of(dtype);
  for (std::size_t i = 0; i < n; ++i) {
    std::memcpy(tensors[i].data, in, tensors[i].count * es);
    in += tensors[i].count * es;
  }
}

bool cast_to_half(const float* in, std::uint16_t* out, std::size_t count, float scale, HalfKind kind) {
  unsigned bad = 0;
  if (kind == HalfKind::BF16) {
    for (std::size_t i = 0; i < count; ++i) {
      const float x = in[i] * scale;
      out[i] = f32_to_bf16(x);
      bad |= !std::isfinite(bf16_to_f32(out[i])) | !std::isfinite(in[i]);
    }
  } else {
    for (std::size_t i = 0; i < count; ++i) {
      const float x = in[i] * scale;
      out[i] = f32_to_f16(x);
      bad |= !std::isfinite(f16_to_f32(out[i])) | !std::isfinite(in[i]);
    }
  }
  return bad != 0;
}

bool cast_from_half(const std::uint16_t* in, float* out, std::size_t count, float scale, HalfKind kind) {
  unsigned bad = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const float x = (kind == HalfKind::BF16 ? bf16_to_f32(in[i]) : f16_to_f32(in[i])) * scale;
    out[i] = x;
    bad |= !std::isfinite(x);
  }
  return bad != 0;
}

double l2_norm(const ConstTensorRef* tensors, std::size_t n, DType dtype) {
  const int tag = norm_tag(dtype);
  std::vector<float> partials;
  for (std::size_t t = 0; t < n; ++t) {
    const void* base = tensors[t].data;
    const std::size_t count = tensors[t].count;
    for (std::size_t c = 0; c < count; c += kNormChunk) {
      if (tag == 0) {
        const float* f = static_cast<const float*>(base);
        partials.push_back(chunk_sum_of_squares([f](std::size_t i) { return f[i]; }, c, count));
      } else {
        partials.push_back(chunk_sum_of_squares([base, tag](std::size_t i) { return load_as_f32(base, i, tag); }, c, count));
      }
    }
  }
  // Stage 2, the GPU's single finishing block: lane l adds partials l, l+256, ... in double.
  double lanes[kLanes] = {};
  for (std::size_t k = 0; k < partials.size(); ++k) lanes[k % kLanes] += static_cast<double>(partials[k]);
  for (unsigned s = kLanes / 2; s > 0; s /= 2)
    for (unsigned l = 0; l < s; ++l) lanes[l] = lanes[l] + lanes[l + s];
  return std::sqrt(lanes[0]);
}

void adamw_f32(const TensorRef* params, const ConstTensorRef* grads, const TensorRef* m, const TensorRef* v,
               std::size_t n, const AdamWConfig& config, const int* found_inf) {
  if (found_inf && *found_inf) return;
  const AdamWScalars s = adamw_scalars(config);
  for (std::size_t t = 0; t < n; ++t) {
    float* p = static_cast<float*>(params[t].data);
    const float* g = static_cast<const float*>(grads[t].data);
    float* mm = static_cast<float*>(m[t].data);
    float* vv = static_cast<float*>(v[t].data);
    for (std::size_t i = 0; i < params[t].count; ++i) adamw_element(p[i], g[i], mm[i], vv[i], s);
  }
}

void adamw_bf16_master(const TensorRef* params_bf16, const ConstTensorRef* grads_bf16, const TensorRef* master,
                       const TensorRef* m, const TensorRef* v, std::size_t n, const AdamWConfig& config,
                       const int* found_inf) {
  if (found_inf && *found_inf) return;
  const AdamWScalars s = adamw_scalars(config);
  for (std::size_t t = 0; t < n; ++t) {
    auto* p = static_cast<std::uint16_t*>(params_bf16[t].data);
    const auto* g = static_cast<const std::uint16_t*>(grads_bf16[t].data);
    float* w = static_cast<float*>(master[t].data);
    float* mm = static_cast<float*>(m[t].data);
    float* vv = static_cast<float*>(v[t].data);
    for (std::size_t i = 0; i < params_bf16[t].count; ++i) {
      adamw_element(w[i], bf16_to_f32(g[i]), mm[i], vv[i], s);
      p[i] = f32_to_bf16(w[i]);
    }
  }
}

std::vector<std::uint64_t> block_digests(const void* data, std::size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::vector<std::uint64_t> out;
  for (std::size_t off = 0; off < bytes || (bytes == 0 && out.empty()); off += kChecksumBlock) {
    const std::size_t len = bytes == 0 ? 0 : std::min(kChecksumBlock, bytes - off);
    const unsigned char* block = p + off;
    std::uint64_t acc[kLanes];
    for (unsigned l = 0; l < kLanes; ++l) acc[l] = lane_seed(l);
    const std::size_t words = (len + 7) / 8;
    if (len == kChecksumBlock) {
      // Full, aligned-size block: plain little-endian loads.
      for (std::size_t j0 = 0; j0 < words; j0 += kLanes)
        for (unsigned l = 0; l < kLanes; ++l) {
          std::uint64_t w;
          std::memcpy(&w, block + (j0 + l) * 8, 8);
          acc[l] = lane_round(acc[l], w);
        }
    } else {
      for (std::size_t j = 0; j < words; ++j) acc[j % kLanes] = lane_round(acc[j % kLanes], block_word(block, len, j));
    }
    std::uint64_t h = kP5 + len;
    for (unsigned l = 0; l < kLanes; ++l) h = merge_lane(h, acc[l]);
    out.push_back(avalanche(h));
    if (bytes == 0) break;
  }
  return out;
}

std::uint64_t combine_digests(const std::vector<std::uint64_t>& digests) {
  return XXH3_64bits(digests.data(), digests.size() * sizeof(std::uint64_t));
}

std::uint64_t checksum(const void* data, std::size_t bytes) { return combine_digests(block_digests(data, bytes)); }

}  // namespace trainrt::kernels::cpu
