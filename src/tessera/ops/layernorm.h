// LayerNorm over the last axis: y = (x - mean) * rstd * weight + bias.
// in/out: [n, h]; weight, bias: [h]; mean, rstd: [n] (saved for backward). Same float dtype throughout.
#pragma once
#include "tessera/core/tensor.h"

namespace tessera::ops {

void layernorm_forward(const Tensor& in, const Tensor& weight, const Tensor& bias, double eps, const Tensor& out,
                       const Tensor& mean, const Tensor& rstd);
// din is overwritten (it may alias dout); dweight and dbias accumulate (+=). residual_grad (optional,
// like din): the gradient of a residual branch that reads `in` too, added to din before din is rounded to
// its dtype (a pre-norm block's dx = norm backward + the residual's gradient, in one pass).
void layernorm_backward(const Tensor& dout, const Tensor& in, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd, const Tensor& din, const Tensor& dweight, const Tensor& dbias,
                        const Tensor& residual_grad = Tensor());

}  // namespace tessera::ops
