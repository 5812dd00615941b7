// Linear layer: out[n, o] = in[n, i] . weight[o, i]^T + bias[o]  (weight stored [out, in] as
// PyTorch/Megatron). bias may be an undefined Tensor(). CPU GEMMs go through CBLAS.
#pragma once
#include "tessera/core/tensor.h"

namespace tessera::ops {

void linear_forward(const Tensor& in, const Tensor& weight, const Tensor& bias, const Tensor& out);
// din is overwritten (skipped when undefined); dweight and dbias accumulate (+=), which is
// Megatron's gradient-accumulation fusion: micro-batches add straight into the main gradient.
void linear_backward(const Tensor& dout, const Tensor& in, const Tensor& weight, const Tensor& din,
                     const Tensor& dweight, const Tensor& dbias);

// out[m, n] = a[m, k] . b[n, k]^T (+ out if accumulate): the one GEMM the CPU ops share.
void matmul_nt(const Tensor& a, const Tensor& b, const Tensor& out, bool accumulate);

}  // namespace tessera::ops
