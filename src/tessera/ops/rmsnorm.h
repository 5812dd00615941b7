// RMSNorm over the last axis (Megatron / Llama): y = x * rsqrt(mean(x^2) + eps) * weight.
// in/out: [n, h]; weight: [h]; rstd: [n] (saved for backward). Same float dtype throughout on the
// CPU; on CUDA rstd may be f32 (as LayerNorm's mean/rstd) and dweight f32 (main grad).
#pragma once
#include "tessera/core/tensor.h"

namespace tessera::ops {

void rmsnorm_forward(const Tensor& in, const Tensor& weight, double eps, const Tensor& out, const Tensor& rstd);
// din is overwritten (may alias dout); dweight accumulates (+=).
void rmsnorm_backward(const Tensor& dout, const Tensor& in, const Tensor& weight, const Tensor& rstd,
                      const Tensor& din, const Tensor& dweight);

namespace detail {
// Shape checks shared by the CPU and CUDA paths; returns the number of rows.
int64_t check_rmsnorm_shapes(const char* op, const Tensor& in, const Tensor& weight, const Tensor& rstd);
}  // namespace detail

}  // namespace tessera::ops
