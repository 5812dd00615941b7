// Token permutation for the experts (Megatron's moe_utils.permute / unpermute): the kept slots of a
// Routing sorted by expert (stable: token order within an expert), so expert e's input is the
// contiguous row block [offset_e, offset_e + rows_per_expert[e]) of the permuted tokens; then the
// weighted combine of the experts' outputs back to token order: y[t] = sum_j probs[t, j] out[row(t, j)].
// With padding (rows_per_expert = capacity) each expert's block is filled up to the capacity with
// zero rows (row_slot = -1) that the combine ignores. f32 host tensors.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "tessera/core/tensor.h"
#include "tessera/ops/moe_router.h"

namespace tessera::ops {

struct Permutation {
  int64_t tokens = 0, topk = 0;
  std::vector<int64_t> rows_per_expert;  // [E] (padding included)
  std::vector<int64_t> row_slot;         // [rows] the slot t*k + j of each row, -1: a padding row
  int64_t rows() const { return static_cast<int64_t>(row_slot.size()); }
  int64_t first_row(int64_t expert) const;  // offset of expert's block
};

// pad_to > 0: every expert's block has exactly pad_to rows (>= its kept slots, checked).
Permutation moe_make_permutation(const Routing& routing, int64_t pad_to = 0);

// x [T, h] -> out [rows, h] (padding rows zero).
void moe_permute_forward(const Tensor& x, const Permutation& perm, const Tensor& out);
// dout [rows, h] -> dx [T, h] (overwritten): each token's rows summed.
void moe_permute_backward(const Tensor& dout, const Permutation& perm, const Tensor& dx);
// expert_out [rows, h], probs [T*k] -> y [T, h] (overwritten).
void moe_unpermute_forward(const Tensor& expert_out, const Permutation& perm, std::span<const float> probs,
                           const Tensor& y);
// dy [T, h] -> dexpert_out [rows, h] (overwritten) and dprobs [T*k] (overwritten; 0 for dropped slots).
void moe_unpermute_backward(const Tensor& dy, const Tensor& expert_out, const Permutation& perm,
                            std::span<const float> probs, const Tensor& dexpert_out, std::span<float> dprobs);

}  // namespace tessera::ops
