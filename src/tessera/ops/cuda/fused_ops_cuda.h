// CUDA implementations behind the fused-op dispatchers (rmsnorm.h, rope.h, bias_dropout_add.h): same
// signatures and semantics; storage f32, bf16 or f16 with fp32 math; RMSNorm rstd and the dweight /
// dbias main grads may be f32 next to half activations. Queued on CudaContext's stream, no host sync.
#pragma once
#include <cstdint>

#include "tessera/core/rng.h"
#include "tessera/core/tensor.h"
#include "tessera/ops/rope.h"

namespace tessera::ops::cuda {

void rmsnorm_forward(const Tensor& in, const Tensor& weight, double eps, const Tensor& out, const Tensor& rstd);
// Uses CudaContext's layernorm_sums scratch for the per-column dweight sums (grows on first use only).
void rmsnorm_backward(const Tensor& dout, const Tensor& in, const Tensor& weight, const Tensor& rstd,
                      const Tensor& din, const Tensor& dweight);

// positions: undefined or i32 [s] / [b, s] on the device (values are not range-checked on the host).
void rope_forward_rows(const Tensor& rows, const RopeHeads& heads, const Tensor& positions, double theta);
void rope_backward_rows(const Tensor& grad_rows, const RopeHeads& heads, const Tensor& positions, double theta);

void bias_dropout_add_forward(const Tensor& x, const Tensor& bias, const Tensor& residual, double p,
                              const RandomStream& stream, uint64_t index_offset, const Tensor& out);
void bias_dropout_add_backward(const Tensor& dout, double p, const RandomStream& stream, uint64_t index_offset,
                               const Tensor& dx, const Tensor& dbias);

}  // namespace tessera::ops::cuda
