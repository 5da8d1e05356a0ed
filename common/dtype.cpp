#include "trainrt/dtype.hpp"

#include <fmt/format.h>

#include "trainrt/error.hpp"

namespace trainrt {

const char* to_string(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F64: return "f64";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
  }
  return "?";
}

const char* to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Min: return "min";
    case ReduceOp::Max: return "max";
  }
  return "?";
}

DType parse_dtype(std::string_view name) {
  for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I32, DType::I64})
    if (name == to_string(t)) return t;
  throw Error(fmt::format("unknown dtype '{}'; valid: f32, f64, f16, bf16, i32, i64", name));
}

ReduceOp parse_op(std::string_view name) {
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Min, ReduceOp::Max})
    if (name == to_string(op)) return op;
  throw Error(fmt::format("unknown reduction '{}'; valid: sum, avg, min, max", name));
}

}  // namespace trainrt
