#pragma once
// The host reduction every CPU collective uses. Deterministic: out[i] = in[0][i] op in[1][i] op ...
// op in[n-1][i], always in that order; f16/bf16 accumulate in f32 and round once; avg divides the
// sum by n (integers: truncating division).
#include <cstddef>

#include "trainrt/dtype.hpp"

namespace trainrt {

void reduce_inputs(const void* const* inputs, std::size_t n_inputs, void* out, std::size_t count, DType dtype,
                   ReduceOp op, std::size_t divisor);

// buf[i] /= divisor, the last step of an avg that was reduced as a sum elsewhere (Gloo, across
// nodes): f16/bf16 divide in f32 and round once; integers truncate.
void divide_in_place(void* buf, std::size_t count, DType dtype, unsigned divisor);

}  // namespace trainrt
