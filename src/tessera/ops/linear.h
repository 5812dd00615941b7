// Linear layer: out[n, o] = in[n, i] . weight[o, i]^T + bias[o]  (weight stored [out, in] as
// PyTorch/Megatron). bias may be an undefined Tensor(). CPU GEMMs go through CBLAS.
#pragma once
#include "tessera/core/tensor.h"

namespace tessera::ops {

void linear_forward(const Tensor& in, const Tensor& weight, const Tensor& bias, const Tensor& out);
// out = residual + (in . weight^T + bias): a linear whose output joins a residual stream (a transformer
// layer's attention and MLP outputs without hidden dropout), the sum rounded once to the storage dtype:
// on CUDA the GEMM reads the residual as its C (beta = 1) where the GEMM library runs it (the few-row
// GEMV path adds it in a second pass); the CPU computes in f32 for bf16/f16. residual: out's shape and
// dtype, and not out itself.
void linear_residual_forward(const Tensor& in, const Tensor& weight, const Tensor& bias, const Tensor& residual,
                             const Tensor& out);
// din is overwritten (skipped when undefined); dweight and dbias accumulate (+=), which is
// Megatron's gradient-accumulation fusion: micro-batches add straight into the main gradient.
void linear_backward(const Tensor& dout, const Tensor& in, const Tensor& weight, const Tensor& din,
                     const Tensor& dweight, const Tensor& dbias);

// The MLP's first linear with the tanh GeLU (ops/activation.h) after it: pre_activation = in . weight^T
// + bias (what the backward reads), out = gelu(pre_activation). On CUDA one cuBLASLt GEMM writes both
// (GELU_AUX_BIAS epilogue) where it offers an algorithm; the CPU runs linear_forward and gelu_forward.
void linear_gelu_forward(const Tensor& in, const Tensor& weight, const Tensor& bias, const Tensor& pre_activation,
                         const Tensor& out);
// linear_backward of a linear whose input was gelu(pre_activation), giving the gradient of the
// pre-activation: dpre = (dout . weight) * gelu'(pre_activation), overwritten; dweight and dbias
// accumulate as linear_backward's. On CUDA the data-gradient GEMM applies gelu' in its epilogue
// (cuBLASLt DGELU) where it offers an algorithm; the CPU runs linear_backward and gelu_backward.
void linear_backward_dgelu(const Tensor& dout, const Tensor& in, const Tensor& weight, const Tensor& pre_activation,
                           const Tensor& dpre, const Tensor& dweight, const Tensor& dbias);

// out[m, n] = a[m, k] . b[n, k]^T (+ out if accumulate): the one GEMM the CPU ops share.
void matmul_nt(const Tensor& a, const Tensor& b, const Tensor& out, bool accumulate);

}  // namespace tessera::ops
