// Fused ("flash") core self-attention: the semantics of ops/attention.h, saving the per-row
// log-sum-exp lse f32 [b, na, s] instead of probs; CUDA kernels (bf16/f16, attention dropout drawn in
// the kernels with ops/attention.h's masks) or a CPU reference (without dropout).
#pragma once
#include "tessera/core/rng.h"
#include "tessera/core/tensor.h"
#include "tessera/ops/attention.h"

namespace tessera::ops {

// True when the fused CUDA kernels take this attention: qkv a CUDA bf16/f16 tensor [s, b, (na+2ng)hn]
// with head_dim 64 or 128, 16-byte aligned (attention dropout too: params.dropout, dropped in the kernels).
bool flash_attention_supported(const Tensor& qkv, const AttentionParams& params);

// qkv [s, b, (na + 2 ng) hn] (Megatron per-query-group layout); key_padding_mask u8 [b, s] (1 = attend)
// or undefined; params.document_ids i32 [b, s] or undefined (attention within a document only); out [s, b, na hn] of qkv's dtype; lse f32 [b, na, s]: natural log of sum_j exp(score_ij)
// over the keys row i attends (scores scaled by 1/sqrt(hn)), -inf for a row with no key (its out is 0).
// params.dropout > 0 (CUDA only): the probabilities are dropped with dropout_stream's masks, indexed as
// ops::attention_forward indexes its probs (params.dropout_heads / dropout_first_head), so out equals the
// unfused attention's with the same stream. CUDA: bf16/f16 storage; CPU: f32/f64 (lse f32 or qkv's dtype).
// dropout_record (CUDA, params.dropout > 0): an i32 tensor of flash_attention_dropout_record_words
// words into which the forward records its dropout decisions, or undefined.
void flash_attention_forward(const Tensor& qkv, const Tensor& key_padding_mask, const AttentionParams& params,
                             const Tensor& out, const Tensor& lse, const RandomStream* dropout_stream = nullptr,
                             const Tensor& dropout_record = Tensor());
// dqkv (shape and dtype of qkv) is overwritten; dk/dv of a group are summed over its heads. The
// backward needs the forward's key_padding_mask and params.document_ids (undefined if there were
// none) to re-mask the keys, and the forward's dropout stream to redraw its masks, or the forward's
// dropout_record to read them from instead.
void flash_attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                              const Tensor& key_padding_mask, const AttentionParams& params, const Tensor& dqkv,
                              const RandomStream* dropout_stream = nullptr, const Tensor& dropout_record = Tensor());
// The i32 words of the record in which the CUDA forward keeps its attention-dropout decisions for the
// backward (which then need not draw them again: a Philox4x32-10 block per four probabilities), 0
// where the kernels keep none: the CPU, no dropout, head_dim 128, seq not a multiple of 4. 4 bytes per
// 32 probabilities (causal: of the whole s x s square).
int64_t flash_attention_dropout_record_words(const Tensor& qkv, const AttentionParams& params);

#ifdef TESSERA_HAVE_CUDA
namespace cuda {  // the CUDA backend (ops/cuda/flash_attention_cuda.cpp), reached through the dispatchers
void flash_attention_forward(const Tensor& qkv, const Tensor& key_padding_mask, const AttentionParams& params,
                             const Tensor& out, const Tensor& lse, const RandomStream* dropout_stream,
                             const Tensor& dropout_record);
void flash_attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                              const Tensor& key_padding_mask, const AttentionParams& params, const Tensor& dqkv,
                              const RandomStream* dropout_stream, const Tensor& dropout_record);
int64_t flash_attention_dropout_record_words(const Tensor& qkv, const AttentionParams& params);
}  // namespace cuda
#endif

}  // namespace tessera::ops
