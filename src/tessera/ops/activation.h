// GeLU with the tanh approximation (GPT-2's "gelu_new"):
// gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
#pragma once
#include "tessera/core/tensor.h"

namespace tessera::ops {

void gelu_forward(const Tensor& in, const Tensor& out);
void gelu_backward(const Tensor& dout, const Tensor& in, const Tensor& din);  // din overwritten

}  // namespace tessera::ops
