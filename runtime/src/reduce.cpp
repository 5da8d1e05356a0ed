#include "trainrt/runtime/reduce.hpp"

#include <algorithm>
#include <cstdint>

#include "trainrt/kernels/half.hpp"

namespace trainrt {
namespace {

// Blocks small enough to stay in L1 so each element is read from memory once per input.
constexpr std::size_t kBlock = 512;

template <typename T, typename Acc, typename Load, typename Store>
void reduce_typed(const void* const* inputs, std::size_t n, void* out_v, std::size_t count, ReduceOp op,
                  std::size_t divisor, Load load, Store store) {
  T* out = static_cast<T*>(out_v);
  alignas(64) Acc acc[kBlock];
  for (std::size_t base = 0; base < count; base += kBlock) {
    const std::size_t m = std::min(kBlock, count - base);
    const T* in0 = static_cast<const T*>(inputs[0]) + base;
    for (std::size_t i = 0; i < m; ++i) acc[i] = load(in0[i]);
    for (std::size_t r = 1; r < n; ++r) {
      const T* in = static_cast<const T*>(inputs[r]) + base;
      switch (op) {
        case ReduceOp::Sum:
        case ReduceOp::Avg:
          for (std::size_t i = 0; i < m; ++i) acc[i] = acc[i] + load(in[i]);
          break;
        case ReduceOp::Min:
          for (std::size_t i = 0; i < m; ++i) acc[i] = std::min(acc[i], load(in[i]));
          break;
        case ReduceOp::Max:
          for (std::size_t i = 0; i < m; ++i) acc[i] = std::max(acc[i], load(in[i]));
          break;
      }
    }
    if (op == ReduceOp::Avg) {
      const Acc d = static_cast<Acc>(divisor);
      for (std::size_t i = 0; i < m; ++i) acc[i] = acc[i] / d;
    }
    for (std::size_t i = 0; i < m; ++i) out[base + i] = store(acc[i]);
  }
}

template <typename T>
void reduce_plain(const void* const* inputs, std::size_t n, void* out, std::size_t count, ReduceOp op,
                  std::size_t divisor) {
  reduce_typed<T, T>(inputs, n, out, count, op, divisor, [](T v) { return v; }, [](T v) { return v; });
}

template <typename T>
void divide_plain(void* buf, std::size_t count, unsigned n) {
  T* p = static_cast<T*>(buf);
  for (std::size_t i = 0; i < count; ++i) p[i] = static_cast<T>(p[i] / static_cast<T>(n));
}

void divide_half(void* buf, std::size_t count, unsigned n, float (*load)(std::uint16_t), std::uint16_t (*store)(float)) {
  auto* p = static_cast<std::uint16_t*>(buf);
  for (std::size_t i = 0; i < count; ++i) p[i] = store(load(p[i]) / static_cast<float>(n));
}

}  // namespace

void divide_in_place(void* buf, std::size_t count, DType t, unsigned n) {
  switch (t) {
    case DType::F32: return divide_plain<float>(buf, count, n);
    case DType::F64: return divide_plain<double>(buf, count, n);
    case DType::I32: return divide_plain<std::int32_t>(buf, count, n);
    case DType::I64: return divide_plain<std::int64_t>(buf, count, n);
    case DType::F16: return divide_half(buf, count, n, kernels::f16_to_f32, kernels::f32_to_f16);
    case DType::BF16: return divide_half(buf, count, n, kernels::bf16_to_f32, kernels::f32_to_bf16);
  }
}

void reduce_inputs(const void* const* inputs, std::size_t n, void* out, std::size_t count, DType dtype, ReduceOp op,
                   std::size_t divisor) {
  if (count == 0 || n == 0) return;
  switch (dtype) {
    case DType::F32: return reduce_plain<float>(inputs, n, out, count, op, divisor);
    case DType::F64: return reduce_plain<double>(inputs, n, out, count, op, divisor);
    case DType::I32: return reduce_plain<std::int32_t>(inputs, n, out, count, op, divisor);
    case DType::I64: return reduce_plain<std::int64_t>(inputs, n, out, count, op, divisor);
    case DType::F16:
      return reduce_typed<std::uint16_t, float>(inputs, n, out, count, op, divisor, kernels::f16_to_f32,
                                                kernels::f32_to_f16);
    case DType::BF16:
      return reduce_typed<std::uint16_t, float>(inputs, n, out, count, op, divisor, kernels::bf16_to_f32,
                                                kernels::f32_to_bf16);
  }
}

}  // namespace trainrt
