// LayerNorm over the last axis: y = (x - mean) * rstd * weight + bias.
// in/out: [n, h]; weight, bias: [h]; mean, rstd: [n] (saved for backward). Same float dtype throughout.
#pragma once
#include "tessera/core/tensor.h"

namespace tessera::ops {

void layernorm_forward(const Tensor& in, const Tensor& weight, const Tensor& bias, double eps, const Tensor& out,
                       const Tensor& mean, const Tensor& rstd);
// din is overwritten; dweight and dbias accumulate (+=).
void layernorm_backward(const Tensor& dout, const Tensor& in, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd, const Tensor& din, const Tensor& dweight, const Tensor& dbias);

}  // namespace tessera::ops
