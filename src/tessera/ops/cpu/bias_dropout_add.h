// CPU reference of the fused bias + dropout + residual add (Megatron's bias_dropout_add_fused_train)
// on raw row-major arrays (float, double), with the mask of dropout_apply (cpu/dropout.h).
#pragma once
#include <cstdint>

#include "tessera/core/rng.h"

namespace tessera::ops::cpu {

// out[i] = residual[i] + dropout(x[i] + bias[i % cols]) where dropout keeps element i iff
// stream.uniform_of_quarter(index_offset + i) >= p and scales by T(1 / (1 - p)); bias may be nullptr. The same
// T roundings as add + dropout_apply + add, in the same order, so the result equals the unfused ops
// bit for bit. out may alias x or residual.
template <typename T>
void bias_dropout_add_forward(const T* x, const T* bias, const T* residual, int64_t n, int64_t cols, double p,
                              const RandomStream& stream, uint64_t index_offset, T* out);
// dbias[c] += sum over rows of dx[r, c], accumulated in double.
template <typename T>
void column_sum_accumulate(const T* dx, int64_t rows, int64_t cols, T* dbias);

}  // namespace tessera::ops::cpu
