#pragma once
// Element i of a buffer of any collective dtype, read and written as a double: the collective
// tests fill and check buffers of every dtype through these two.
#include <cstddef>
#include <cstdint>

#include "trainrt/dtype.hpp"
#include "trainrt/kernels/half.hpp"

namespace trainrt::testing {

inline void store(void* buf, std::size_t i, DType t, double v) {
  namespace k = trainrt::kernels;
  switch (t) {
    case DType::F32: static_cast<float*>(buf)[i] = static_cast<float>(v); break;
    case DType::F64: static_cast<double*>(buf)[i] = v; break;
    case DType::F16: static_cast<std::uint16_t*>(buf)[i] = k::f32_to_f16(static_cast<float>(v)); break;
    case DType::BF16: static_cast<std::uint16_t*>(buf)[i] = k::f32_to_bf16(static_cast<float>(v)); break;
    case DType::I32: static_cast<std::int32_t*>(buf)[i] = static_cast<std::int32_t>(v); break;
    case DType::I64: static_cast<std::int64_t*>(buf)[i] = static_cast<std::int64_t>(v); break;
  }
}

inline double load(const void* buf, std::size_t i, DType t) {
  namespace k = trainrt::kernels;
  switch (t) {
    case DType::F32: return static_cast<const float*>(buf)[i];
    case DType::F64: return static_cast<const double*>(buf)[i];
    case DType::F16: return k::f16_to_f32(static_cast<const std::uint16_t*>(buf)[i]);
    case DType::BF16: return k::bf16_to_f32(static_cast<const std::uint16_t*>(buf)[i]);
    case DType::I32: return static_cast<const std::int32_t*>(buf)[i];
    case DType::I64: return static_cast<double>(static_cast<const std::int64_t*>(buf)[i]);
  }
  return 0;
}

}  // namespace trainrt::testing
