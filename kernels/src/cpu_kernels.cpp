// CPU twins of the CUDA kernels. Loops are written so GCC vectorises them (-O3, hardware FMA for
// the explicit fmaf calls where the target has it); the file is compiled with -ffp-contract=off, so
// no other product is fused and each result rounds exactly where element_ops.hpp says.
#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "trainrt/error.hpp"
#include "trainrt/kernels/cpu.hpp"
#include "trainrt/kernels/element_ops.hpp"

static_assert(std::endian::native == std::endian::little, "the checksum contract reads little-endian words");

namespace trainrt::kernels::cpu {
namespace {

int norm_tag(DType t) {
  if (t != DType::F32 && t != DType::F16 && t != DType::BF16)
    throw UsageError(std::string("l2_norm takes f32, f16 or bf16, not ") + to_string(t), "kernels");
  return t == DType::F16 ? 1 : t == DType::BF16 ? 2 : 0;
}

// One chunk's f32 partial in the order of element_ops.hpp: a flat array of 1024 accumulators is
// the 256 lanes x 4 slot positions (accumulator 4l + c belongs to lane l, position c), so the hot
// loop is a plain stride-1 fma loop GCC vectorises without changing any rounding.
template <typename Load>
float chunk_partial(Load load, std::size_t base, std::size_t count) {
  constexpr std::size_t kRow = kLanes * kNormVec;  // elements per slot row: one slot for every lane
  float acc[kRow] = {};
  const std::size_t len = std::min(kNormChunk, count - base);
  if (len == kNormChunk) {
    for (std::size_t j = 0; j < kNormSlotsPerLane; ++j)
      for (std::size_t i = 0; i < kRow; ++i) {
        const float x = load(base + j * kRow + i);
        acc[i] = std::fma(x, x, acc[i]);
      }
  } else {
    for (std::size_t j = 0; j < kNormSlotsPerLane; ++j)
      for (std::size_t i = 0; i < kRow && j * kRow + i < len; ++i) {
        const float x = load(base + j * kRow + i);
        acc[i] = std::fma(x, x, acc[i]);
      }
  }
  float lanes[kLanes];
  for (unsigned l = 0; l < kLanes; ++l) lanes[l] = norm_lane_value(acc + kNormVec * l);
  return tree256_host(lanes, [](float a, float b) { return a + b; });
}

}  // namespace

void pack(const ConstTensorRef* tensors, std::size_t n, DType dtype, void* bucket) {
  auto* out = static_cast<unsigned char*>(bucket);
  const std::size_t es = size_of(dtype);
  for (std::size_t i = 0; i < n; ++i) {
    if (tensors[i].count) std::memcpy(out, tensors[i].data, tensors[i].count * es);
    out += tensors[i].count * es;
  }
}

void unpack(const void* bucket, const TensorRef* tensors, std::size_t n, DType dtype) {
  const auto* in = static_cast<const unsigned char*>(bucket);
  const std::size_t es = size_of(dtype);
  for (std::size_t i = 0; i < n; ++i) {
    if (tensors[i].count) std::memcpy(tensors[i].data, in, tensors[i].count * es);
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
        partials.push_back(chunk_partial([f](std::size_t i) { return f[i]; }, c, count));
      } else {
        partials.push_back(chunk_partial([base, tag](std::size_t i) { return load_as_f32(base, i, tag); }, c, count));
      }
    }
  }
  // Stage 2, the GPU's last block: lane l adds partials l, l+256, ... in double, then tree256.
  double lanes[kLanes] = {};
  for (std::size_t k = 0; k < partials.size(); ++k) lanes[k % kLanes] += static_cast<double>(partials[k]);
  return std::sqrt(tree256_host(lanes, [](double a, double b) { return a + b; }));
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
  out.reserve(std::max<std::size_t>(1, (bytes + kChecksumBlock - 1) / kChecksumBlock));
  std::size_t off = 0;
  do {  // an empty buffer is one empty block
    const std::size_t len = std::min(kChecksumBlock, bytes - off);
    const unsigned char* block = p + off;
    std::uint64_t acc[kLanes];
    for (unsigned l = 0; l < kLanes; ++l) acc[l] = lane_seed(l);
    const std::size_t segments = (len + kDigestSegment - 1) / kDigestSegment;
    const std::size_t whole = len / kDigestSegment;
    for (std::size_t s = 0; s < segments; ++s) {
      std::uint64_t w[2];
      if (s < whole) {
        std::memcpy(w, block + s * kDigestSegment, sizeof w);  // little-endian host (x86-64, aarch64)
      } else {
        w[0] = block_word(block, len, 2 * s);
        w[1] = block_word(block, len, 2 * s + 1);
      }
      std::uint64_t& a = acc[s % kLanes];
      a = lane_round(lane_round(a, w[0]), w[1]);
    }
    out.push_back(digest_finish(len, tree256_host(acc, digest_merge)));
    off += len;
  } while (off < bytes);
  return out;
}

std::uint64_t combine_digests(const std::vector<std::uint64_t>& digests) {
  return XXH3_64bits(digests.data(), digests.size() * sizeof(std::uint64_t));
}

std::uint64_t checksum(const void* data, std::size_t bytes) { return combine_digests(block_digests(data, bytes)); }

}  // namespace trainrt::kernels::cpu
