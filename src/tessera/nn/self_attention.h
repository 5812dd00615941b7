// Self-attention block: fused QKV projection (Megatron's per-query-group layout), core attention
// (scaled masked softmax, attention dropout) and the output projection. Rows are tokens ordered
// sequence-major ([s, b] flattened), as everywhere inside the transformer. Tensor parallel: QKV is
// column-parallel (query groups split contiguously, ng/tp groups and na/tp heads per rank), the
// output projection row-parallel. With TP > 1, attention-probability dropout draws from a stream
// keyed by the TP rank (Megatron's model-parallel RNG): statistically right, not TP=1's masks.
// Positions: none here (learned positions are the embedding's), RoPE on q and k, or ALiBi.
// Document masks (data.reset_attention_mask): per-token document ids restrict attention to the
// token's own document, in the unfused and the fused attention alike.
#pragma once
#include <string>

#include "tessera/nn/dropout_context.h"
#include "tessera/nn/forward_scratch.h"
#include "tessera/nn/parallel_linear.h"
#include "tessera/ops/attention.h"

namespace tessera::nn {

// One layer's KV cache for generation: keys and values of this rank's query groups,
// [b, capacity, ng/tp * hn] each (ops/cached_attention.h), allocated once for a batch.
struct KvCacheSlot {
  Tensor k, v;
  Tensor past;  // CUDA: i32 [1] on the device, the cached tokens the kernel reads (ops/cached_attention.h)
};

// Rotary position embedding applied to q and k inside the block (after the QKV projection, before
// core attention; its backward rotates dq and dk back), positions from the micro-batch.
struct RotaryOptions {
  bool enabled = false;
  int64_t rotary_dim = 0;  // rotated dims per head (0: head_dim)
  double base = 10000.0;
  bool interleaved = false;
};

struct AttentionShape {
  int64_t hidden_size, num_heads, num_query_groups;
  double attention_dropout;
  bool bias = true;  // linear_qkv / linear_proj biases (model.add_bias_linear)
  RotaryOptions rotary = {};
  bool alibi = false;  // ALiBi bias on the scores (slopes of the global heads this rank holds)
  bool causal = true;  // false: bidirectional (BERT's encoder; keys masked by the key padding mask only)
};

class SelfAttention {
 public:
  struct Saved {
    Tensor in, qkv, probs, context;  // in: the QKV GEMM's (all-gathered) input
    // Fused (flash) attention on CUDA bf16/f16 without dropout: lse f32 [b, na, s] instead of probs,
    // and the forward's key padding mask (must stay alive until backward) to re-mask the keys.
    Tensor lse, key_padding_mask;
    // Fused attention with dropout where the kernels record it: the forward's dropout decisions
    // (ops::flash_attention_dropout_record_words), read by the backward instead of drawn again.
    Tensor dropout_record;
    Tensor positions;  // RoPE: the forward's position ids (i32 [s*b] or undefined), for backward
    Tensor document_ids;  // the forward's document ids (i32 [b, s] or undefined), for backward
  };
  SelfAttention(ParameterStore& store, const std::string& name, const AttentionShape& shape, double init_std,
                double output_init_std, const parallel::TensorParallel& tp = {});
  // in: [s*b, h] ([s*b/tp, h] under sequence parallelism, as the output); key_padding_mask: u8 [b, s] or
  // undefined; positions (RoPE): i32 [s*b] sequence-major (undefined: 0..s-1), kept alive until backward;
  // document_ids (Megatron's reset_attention_mask): i32 [b, s] on the arena's device or undefined (one
  // document per sample): a token attends only to earlier tokens of its own document; kept alive until backward.
  // scratch (nn/forward_scratch.h): the output projection's result (dead after the caller's residual
  // add) goes to its transient arena; with drop_recomputable the unfused path's probs too, not kept
  // (saved.probs undefined, saved.key_padding_mask set): backward recomputes them with the same masks.
  // residual (the output's shape, or undefined): added to the output projection's result in its GEMM
  // (RowParallelLinear::forward), which then lives in `arena`.
  Tensor forward(Arena& arena, const Tensor& in, int64_t seq, int64_t batch, const Tensor& key_padding_mask,
                 const DropoutContext& dropout, Saved& saved, const Tensor& positions = Tensor(),
                 const Tensor& document_ids = Tensor(), const ForwardScratch& scratch = {},
                 const Tensor& residual = Tensor()) const;
  Tensor backward(Arena& arena, const Tensor& dout, int64_t seq, int64_t batch, const DropoutContext& dropout,
                  const Saved& saved) const;
  // Generation (no dropout, no saved activations): in [t*b, h] for t new tokens per sequence at
  // cache indices [past, past + t); their keys and values go into cache; key_mask u8 [b, capacity].
  // positions: the new tokens' position ids, i32 [t*b] sequence-major (per row under left padding);
  // RoPE rotates q and k by them before k enters the cache (required with RoPE, unused otherwise).
  // ALiBi biases by cache-index distance, as the training forward does by sequence index.
  Tensor forward_cached(Arena& arena, const Tensor& in, int64_t tokens, int64_t batch, const Tensor& key_mask,
                        const KvCacheSlot& cache, int64_t past, const Tensor& positions = Tensor()) const;
  // forward_cached in parts, for a fused decode step (nn::TransformerLayer): the projections, and the
  // cached attention from the QKV projection's output [t*b, qkv_width] (RoPE, the cache append,
  // attention) to the context [t*b, na/tp * hn] that linear_proj takes.
  const ColumnParallelLinear& qkv_linear() const { return qkv_; }
  const RowParallelLinear& proj_linear() const { return proj_; }
  Tensor attend_cached(Arena& arena, const Tensor& qkv, int64_t tokens, int64_t batch, const Tensor& key_mask,
                       const KvCacheSlot& cache, int64_t past, const Tensor& positions = Tensor()) const;
  // The width of this rank's cache rows: ng/tp * hn.
  int64_t kv_width() const;
  int64_t qkv_width() const;  // this rank's linear_qkv output columns: (na + 2 ng)/tp * hn

 private:
  // document_ids: params().document_ids (undefined: no document masks).
  ops::AttentionParams params(const DropoutContext& dropout, const Tensor& document_ids = Tensor()) const;
  void rotate(const Tensor& qkv_rows, const Tensor& positions, bool inverse) const;  // RoPE on q and k
  RandomStream dropout_stream(const DropoutContext& dropout) const;
  // The probs a forward with `discard` did not keep: its softmax and dropout again.
  Tensor recompute_probs(Arena& arena, int64_t seq, int64_t batch, const DropoutContext& dropout,
                         const Saved& saved) const;
  std::string name_;
  AttentionShape shape_;
  parallel::TensorParallel tp_;
  ColumnParallelLinear qkv_;
  RowParallelLinear proj_;
};

}  // namespace tessera::nn
