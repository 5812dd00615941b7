// Column sums of a [rows, cols] tensor added into a [cols] vector: a linear's bias gradient from its
// output gradient (the CPU sums in double; the GPU's fixed-order column sums are kernels/column_sums.cu).
#pragma once
#include "tessera/core/tensor.h"

namespace tessera::ops {

// sums[c] += sum over rows r of x[r, c]. x: [rows, cols] (any leading shape flattened) of a float dtype;
// sums: [cols] of x's dtype, or f32 when x is bf16 / f16.
void column_sum_accumulate(const Tensor& x, const Tensor& sums);

}  // namespace tessera::ops
