// Dispatch of the GPU mixture-of-experts ops (moe_device.h) to ops/cuda/moe_ops_cuda.cpp.
#include "tessera/ops/moe_device.h"

#include "tessera/core/error.h"
#include "tessera/ops/op_checks.h"
#ifdef TESSERA_HAVE_CUDA
#include "tessera/ops/cuda/grouped_gemm_cuda.h"
#include "tessera/ops/cuda/moe_ops_cuda.h"
#define TESSERA_MOE_CUDA(op, call) return ::tessera::ops::cuda::call
#else
#define TESSERA_MOE_CUDA(op, call) TESSERA_FAIL(op, ": this build has no CUDA backend (the MoE device ops need one)")
#endif

namespace tessera::ops {

void moe_router_forward_device(const Tensor& logits, const RouterOptions& o, const Tensor& experts,
                               const Tensor& probs) {
  TESSERA_MOE_CUDA("moe_router_forward_device", moe_router_forward(logits, o, experts, probs));
}
void moe_router_backward_device(const Tensor& logits, const Tensor& experts, const RouterOptions& o,
                                const Tensor& dprobs, const Tensor& dlogits) {
  TESSERA_MOE_CUDA("moe_router_backward_device", moe_router_backward(logits, experts, o, dprobs, dlogits));
}
void moe_expert_counts_device(const Tensor& experts, const Tensor& counts) {
  TESSERA_MOE_CUDA("moe_expert_counts_device", moe_expert_counts(experts, counts));
}
void moe_permute_forward_device(const Tensor& x, const Tensor& row_slot, int64_t topk, const Tensor& out) {
  TESSERA_MOE_CUDA("moe_permute_forward_device", moe_permute_forward(x, row_slot, topk, out));
}
void moe_permute_backward_device(const Tensor& dout, const Tensor& slot_row, const Tensor& dx) {
  TESSERA_MOE_CUDA("moe_permute_backward_device", moe_permute_backward(dout, slot_row, dx));
}
void moe_unpermute_forward_device(const Tensor& expert_out, const Tensor& slot_row, const Tensor& probs,
                                  const Tensor& y) {
  TESSERA_MOE_CUDA("moe_unpermute_forward_device", moe_unpermute_forward(expert_out, slot_row, probs, y));
}
void moe_unpermute_backward_device(const Tensor& dy, const Tensor& expert_out, const Tensor& row_slot,
                                   const Tensor& probs, const Tensor& dexpert_out, const Tensor& dprobs) {
  TESSERA_MOE_CUDA("moe_unpermute_backward_device",
                   moe_unpermute_backward(dy, expert_out, row_slot, probs, dexpert_out, dprobs));
}

void moe_grouped_linear_forward(const Tensor& in, std::span<const Tensor> weights, std::span<const Tensor> biases,
                                std::span<const int64_t> rows, const Tensor& out) {
  TESSERA_MOE_CUDA("moe_grouped_linear_forward", grouped_linear_forward(in, weights, biases, rows, out));
}
void moe_grouped_linear_backward(const Tensor& dout, const Tensor& in, std::span<const Tensor> weights,
                                 std::span<const int64_t> rows, const Tensor& din, std::span<const Tensor> dweights,
                                 std::span<const Tensor> dbiases) {
  TESSERA_MOE_CUDA("moe_grouped_linear_backward",
                   grouped_linear_backward(dout, in, weights, rows, din, dweights, dbiases));
}

std::vector<int64_t> moe_slot_rows(const Permutation& p) {
  std::vector<int64_t> slot_row(static_cast<size_t>(p.tokens * p.topk), -1);
  for (int64_t r = 0; r < p.rows(); ++r) {
    const int64_t slot = p.row_slot[static_cast<size_t>(r)];
    if (slot >= 0) slot_row[static_cast<size_t>(slot)] = r;
  }
  return slot_row;
}

}  // namespace tessera::ops
