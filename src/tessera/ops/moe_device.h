// The mixture-of-experts ops on the GPU (kernels/moe.cu): the same math as the CPU references in
// ops/moe_router.h and ops/moe_permute.h, on device tensors, with the routing and the permutation
// as device index tensors instead of host vectors:
//   experts i32 [T*k], probs f32 [T*k]   (Routing::experts / probs; slot t*k + j)
//   row_slot i64 [rows]                   (Permutation::row_slot: each row's slot, -1 a padding row)
//   slot_row i64 [T*k]                    (its inverse: each slot's row, -1 a dropped slot)
// Router logits stay f32 (as Megatron keeps them); the token rows are f32, bf16 or f16 with fp32
// math. Every sum runs in a fixed order (no float atomics): results are deterministic, and the f32
// sums add in the CPU reference's order. Ties in the top-k go to the lower expert index.
// Only CUDA tensors; a CPU-only build fails naming the op.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "tessera/core/tensor.h"
#include "tessera/ops/moe_permute.h"
#include "tessera/ops/moe_router.h"

namespace tessera::ops {

// logits f32 [T, E] -> experts i32 [T*k], probs f32 [T*k] (moe_router_forward's choice and weights).
void moe_router_forward_device(const Tensor& logits, const RouterOptions& options, const Tensor& experts,
                               const Tensor& probs);
// dprobs f32 [T*k] (0 for dropped slots) -> dlogits f32 [T, E], overwritten.
void moe_router_backward_device(const Tensor& logits, const Tensor& experts, const RouterOptions& options,
                                const Tensor& dprobs, const Tensor& dlogits);
// experts i32 [T*k] -> counts i64 [E] (Routing::routed_per_expert), overwritten.
void moe_expert_counts_device(const Tensor& experts, const Tensor& counts);
// x [T, h] -> out [rows, h] (padding rows zero).
void moe_permute_forward_device(const Tensor& x, const Tensor& row_slot, int64_t topk, const Tensor& out);
// dout [rows, h] -> dx [T, h] (overwritten): each token's rows summed.
void moe_permute_backward_device(const Tensor& dout, const Tensor& slot_row, const Tensor& dx);
// expert_out [rows, h], probs f32 [T*k] -> y [T, h] (overwritten).
void moe_unpermute_forward_device(const Tensor& expert_out, const Tensor& slot_row, const Tensor& probs,
                                  const Tensor& y);
// dy [T, h] -> dexpert_out [rows, h] and dprobs f32 [T*k] (both overwritten; 0 for dropped slots).
void moe_unpermute_backward_device(const Tensor& dy, const Tensor& expert_out, const Tensor& row_slot,
                                   const Tensor& probs, const Tensor& dexpert_out, const Tensor& dprobs);

// The experts' linear layers as one grouped GEMM (cublasGemmGroupedBatchedEx): group g is the block
// of rows[g] consecutive rows of in / out with its own weight [o, i] (and bias [o], when biases is not
// empty). forward: out_g = in_g W_g^T + b_g. backward: din_g = dout_g W_g (skipped when din is
// undefined), dW_g += dout_g^T in_g, db_g += the column sums of dout_g (dW / db f32 or in's dtype).
void moe_grouped_linear_forward(const Tensor& in, std::span<const Tensor> weights, std::span<const Tensor> biases,
                                std::span<const int64_t> rows, const Tensor& out);
void moe_grouped_linear_backward(const Tensor& dout, const Tensor& in, std::span<const Tensor> weights,
                                 std::span<const int64_t> rows, const Tensor& din, std::span<const Tensor> dweights,
                                 std::span<const Tensor> dbiases);

// Host helpers: slot_row of a permutation ([T*k], -1 for slots without a row).
std::vector<int64_t> moe_slot_rows(const Permutation& permutation);

}  // namespace tessera::ops
