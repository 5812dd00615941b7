// Fused bias + dropout + residual add (Megatron's bias_dropout_add_fused_train):
// out = residual + dropout(x + bias), bias [cols] optional, x/residual/out [..., cols]. The dropout
// mask is that of dropout_forward with the same stream and index_offset (element i of x).
#pragma once
#include <cstdint>

#include "tessera/core/rng.h"
#include "tessera/core/tensor.h"

namespace tessera::ops {

// Equals add(residual, dropout_forward(x + bias)) bit for bit on the CPU (f32, f64). bias may be an
// undefined Tensor; out may alias x or residual.
void bias_dropout_add_forward(const Tensor& x, const Tensor& bias, const Tensor& residual, double p,
                              const RandomStream& stream, uint64_t index_offset, const Tensor& out);
// dx = dropout_backward(dout) (overwritten, may alias dout); dbias (optional) += column sums of dx,
// of x's dtype or f32 (main grad; on the CPU f32 only where x is bf16/f16/f32). The gradient of the
// residual is dout itself: use dout as dresidual, nothing is copied.
void bias_dropout_add_backward(const Tensor& dout, double p, const RandomStream& stream, uint64_t index_offset,
                               const Tensor& dx, const Tensor& dbias);

namespace detail {
// Shape and probability checks shared by the CPU and CUDA paths; return the number of columns.
int64_t check_bias_dropout_add_forward(const char* op, const Tensor& x, const Tensor& bias, const Tensor& residual,
                                       double p, const Tensor& out);
int64_t check_bias_dropout_add_backward(const char* op, const Tensor& dout, double p, const Tensor& dx,
                                        const Tensor& dbias);
}  // namespace detail

}  // namespace tessera::ops
