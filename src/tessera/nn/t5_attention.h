// T5's attention block (HF T5Attention; Megatron's T5 self- and cross-attention): separate q, k and v
// projections without biases (linear_q, linear_k, linear_v: column-parallel, heads split over TP),
// core attention with an additive bias and no 1/sqrt(d) scaling (ops/biased_attention.h), and the
// row-parallel output projection linear_proj. Inner width = heads x kv_channels (HF's d_kv), which
// need not equal the hidden size. Self-attention reads its keys and values from its own input;
// cross-attention (the decoder's EncDecAttention) from the encoder's output (memory). Rows are
// tokens, sequence-major; under sequence parallelism the inputs and output hold this rank's s/tp
// rows (the column-parallel projections gather them).
#pragma once
#include <string>

#include "tessera/nn/dropout_context.h"
#include "tessera/nn/parallel_linear.h"
#include "tessera/ops/biased_attention.h"

namespace tessera::nn {

struct T5AttentionShape {
  int64_t hidden_size, num_heads, kv_channels;
  double attention_dropout;
  bool causal = false;  // the decoder's self-attention
  bool cross = false;   // keys and values from the encoder's output
};

class T5Attention {
 public:
  struct Saved {
    Tensor q_in, kv_in;        // the projections' (gathered) inputs
    Tensor q, k, v, probs, context;
    Tensor key_padding_mask;   // u8 [b, sk] or undefined
  };
  // Weights drawn as HF's T5 draws them, scaled by init_factor (HF's initializer_factor).
  T5Attention(ParameterStore& store, const std::string& name, const T5AttentionShape& shape, double init_factor,
              const parallel::TensorParallel& tp = {});
  // x [sq*b, h] (this rank's rows under SP); memory: cross-attention's encoder output [sk*b, h] (self:
  // ignored, keys come from x and sk = sq); bias [nh/tp, sq, sk] or undefined; key_padding_mask u8
  // [b, sk] or undefined (kept alive until backward). Returns [sq*b, h] (SP: this rank's rows).
  Tensor forward(Arena& arena, const Tensor& x, const Tensor& memory, int64_t sq, int64_t sk, int64_t batch,
                 const Tensor& bias, const Tensor& key_padding_mask, const DropoutContext& dropout, Saved& saved) const;
  // Returns d(x). dbias ([nh/tp, sq, sk], optional) accumulates the bias gradient; cross-attention
  // adds d(memory) into dmemory (memory's shape).
  Tensor backward(Arena& arena, const Tensor& dout, int64_t sq, int64_t sk, int64_t batch, const DropoutContext& dropout,
                  const Saved& saved, const Tensor& dbias, const Tensor& dmemory) const;

 private:
  ops::BiasedAttentionParams params(int64_t batch, const DropoutContext& dropout) const;
  std::string name_;
  T5AttentionShape shape_;
  parallel::TensorParallel tp_;
  int64_t local_heads_;
  ColumnParallelLinear q_, k_, v_;
  RowParallelLinear proj_;
};

}  // namespace tessera::nn
