#pragma once
// Element types and reductions shared by kernels/ and runtime/.
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace trainrt {

enum class DType : std::uint8_t { F32, F64, F16, BF16, I32, I64 };
enum class ReduceOp : std::uint8_t { Sum, Avg, Min, Max };

constexpr std::size_t size_of(DType t) {
  switch (t) {
    case DType::F32: case DType::I32: return 4;
    case DType::F64: case DType::I64: return 8;
    case DType::F16: case DType::BF16: return 2;
  }
  return 0;
}

const char* to_string(DType t);
const char* to_string(ReduceOp op);
DType parse_dtype(std::string_view name);   // throws trainrt::Error naming the value
ReduceOp parse_op(std::string_view name);

}  // namespace trainrt
