// The CUDA side of the mixture-of-experts device ops (ops/moe_device.h): argument checks, then the
// kernels of kernels/moe.cu on CudaContext's stream.
#pragma once
#include "tessera/core/tensor.h"
#include "tessera/ops/moe_router.h"

namespace tessera::ops::cuda {

void moe_router_forward(const Tensor& logits, const RouterOptions& o, const Tensor& experts, const Tensor& probs);
void moe_router_backward(const Tensor& logits, const Tensor& experts, const RouterOptions& o, const Tensor& dprobs,
                         const Tensor& dlogits);
void moe_expert_counts(const Tensor& experts, const Tensor& counts);
void moe_permute_forward(const Tensor& x, const Tensor& row_slot, int64_t topk, const Tensor& out);
void moe_permute_backward(const Tensor& dout, const Tensor& slot_row, const Tensor& dx);
void moe_unpermute_forward(const Tensor& expert_out, const Tensor& slot_row, const Tensor& probs, const Tensor& y);
void moe_unpermute_backward(const Tensor& dy, const Tensor& expert_out, const Tensor& row_slot, const Tensor& probs,
                            const Tensor& dexpert_out, const Tensor& dprobs);

}  // namespace tessera::ops::cuda
