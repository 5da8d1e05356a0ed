#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace trainrt {

enum class DType : std::uint8_t { F32, F64, F16, BF16, I32, I64 };
enum class ReduceOp : std::uint8_t { Sum, Avg, Min, Max };

std::size_t size_of(DType t);
const char* to_string(DType t);
const char* to_string(ReduceOp op);
DType parse_dtype(std::string_view name);   // throws trainrt::Error naming the value
ReduceOp parse_op(std::string_view name);

}  // namespace trainrt
