// CUDA kernels of the mixture-of-experts layer (kernels/moe.cu), the device side of
// ops/moe_router.h and ops/moe_permute.h (same semantics; ops/moe_device.h documents them):
// the top-k router and its backward on fp32 logits (one thread per token), the per-expert counts
// (integer atomics: deterministic), the gather into expert order, and the weighted combine back
// to token order with their backwards. Every sum runs in a fixed order (no float atomics), so the
// results are deterministic; the f32 sums follow the CPU reference's order (ascending row).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "tessera/core/dtype.h"

namespace tessera::kernels {

// score: 0 softmax, 1 sigmoid. logits f32 [tokens, experts] -> experts i32 / probs f32 [tokens * topk].
void moe_router_forward(const float* logits, int64_t tokens, int64_t experts, int64_t topk, int score,
                        bool pre_softmax, int32_t* chosen, float* probs, cudaStream_t s);
// dprobs f32 [tokens * topk] (0 for dropped slots) -> dlogits f32 [tokens, experts], overwritten.
void moe_router_backward(const float* logits, const int32_t* chosen, const float* dprobs, int64_t tokens,
                         int64_t experts, int64_t topk, int score, bool pre_softmax, float* dlogits, cudaStream_t s);
// counts i64 [experts] = how many of the slots chose each expert (overwritten).
void moe_expert_counts(const int32_t* chosen, int64_t slots, int64_t experts, int64_t* counts, cudaStream_t s);
// out [rows, h] = x [row_slot[r] / topk] (zero where row_slot[r] < 0).
void moe_permute_forward(DType t, const void* x, const int64_t* row_slot, int64_t rows, int64_t h, int64_t topk,
                         void* out, cudaStream_t s);
// dx [tokens, h] = sum over the token's rows (slot_row [tokens * topk], -1: none) of dout [rows, h].
void moe_permute_backward(DType t, const void* dout, const int64_t* slot_row, int64_t tokens, int64_t h,
                          int64_t topk, void* dx, cudaStream_t s);
// y [tokens, h] = sum over the token's rows of probs[slot] * expert_out[row].
void moe_unpermute_forward(DType t, const void* expert_out, const int64_t* slot_row, const float* probs,
                           int64_t tokens, int64_t h, int64_t topk, void* y, cudaStream_t s);
// dexpert_out [rows, h] = probs[slot] * dy[token] (0 for padding rows); dprobs [tokens * topk] =
// dot(dy[token], expert_out[row]), 0 for slots without a row (zeroed here first).
void moe_unpermute_backward(DType t, const void* dy, const void* expert_out, const int64_t* row_slot,
                            const float* probs, int64_t rows, int64_t tokens, int64_t h, int64_t topk,
                            void* dexpert_out, float* dprobs, cudaStream_t s);

}  // namespace tessera::kernels
