// GeLU with the tanh approximation (GPT-2's "gelu_new"):
// gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
#pragma once
#include "tessera/core/tensor.h"

namespace tessera::ops {

void gelu_forward(const Tensor& in, const Tensor& out);
void gelu_backward(const Tensor& dout, const Tensor& in, const Tensor& din);  // din overwritten

// Other elementwise activations (BERT): the exact GeLU x Phi(x) = 0.5 x (1 + erf(x / sqrt 2))
// (HF's "gelu", Megatron-BERT's), tanh (BERT's pooler) and relu (T5 v1.0's feed-forward).
enum class Activation { gelu_erf, tanh, relu };
const char* activation_op_name(Activation kind, bool backward);
void activation_forward(Activation kind, const Tensor& in, const Tensor& out);
// din = dout * f'(in), overwritten.
void activation_backward(Activation kind, const Tensor& dout, const Tensor& in, const Tensor& din);

}  // namespace tessera::ops
