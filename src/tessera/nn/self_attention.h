// Self-attention block: fused QKV projection (Megatron's per-query-group layout), core attention
// (scaled masked softmax, attention dropout) and the output projection. Rows are tokens ordered
// sequence-major ([s, b] flattened), as everywhere inside the transformer. Tensor parallel: QKV is
// column-parallel (query groups split contiguously, ng/tp groups and na/tp heads per rank), the
// output projection row-parallel. With TP > 1, attention-probability dropout draws from a stream
// keyed by the TP rank (Megatron's model-parallel RNG): statistically right, not TP=1's masks.
// Positions: none here (learned positions are the embedding's), RoPE on q and k, or ALiBi.
#pragma once
#include <string>

#include "tessera/nn/dropout_context.h"
#include "tessera/nn/parallel_linear.h"
#include "tessera/ops/attention.h"

namespace tessera::nn {

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
};

class SelfAttention {
 public:
  struct Saved {
    Tensor in, qkv, probs, context;  // in: the QKV GEMM's (all-gathered) input
    // Fused (flash) attention on CUDA bf16/f16 without dropout: lse f32 [b, na, s] instead of probs,
    // and the forward's key padding mask (must stay alive until backward) to re-mask the keys.
    Tensor lse, key_padding_mask;
    Tensor positions;  // RoPE: the forward's position ids (i32 [s*b] or undefined), for backward
  };
  SelfAttention(ParameterStore& store, const std::string& name, const AttentionShape& shape, double init_std,
                double output_init_std, const parallel::TensorParallel& tp = {});
  // in: [s*b, h] ([s*b/tp, h] under sequence parallelism, as the output); key_padding_mask: u8 [b, s] or
  // undefined; positions (RoPE): i32 [s*b] sequence-major (undefined: 0..s-1), kept alive until backward.
  Tensor forward(Arena& arena, const Tensor& in, int64_t seq, int64_t batch, const Tensor& key_padding_mask,
                 const DropoutContext& dropout, Saved& saved, const Tensor& positions = Tensor()) const;
  Tensor backward(Arena& arena, const Tensor& dout, int64_t seq, int64_t batch, const DropoutContext& dropout,
                  const Saved& saved) const;

 private:
  ops::AttentionParams params(const DropoutContext& dropout) const;
  void rotate(const Tensor& qkv_rows, const Tensor& positions, bool inverse) const;  // RoPE on q and k
  RandomStream dropout_stream(const DropoutContext& dropout) const;
  std::string name_;
  AttentionShape shape_;
  parallel::TensorParallel tp_;
  ColumnParallelLinear qkv_;
  RowParallelLinear proj_;
};

}  // namespace tessera::nn
