// One T5 block (HF T5Block), pre-norm with T5's RMS LayerNorm (no mean, no bias):
//   h = x + dropout(self_attention(input_layernorm(x), bias))
//   h = h + dropout(cross_attention(pre_cross_attn_layernorm(h), encoder output))   (decoder only)
//   y = h + dropout(mlp(pre_mlp_layernorm(h)))
// The encoder's self-attention is bidirectional with the encoder's key padding mask, the decoder's
// causal with the decoder's; cross-attention masks the encoder's padding and has no position bias.
// The relative position bias is the stack's (nn/relative_position_bias.h), given to every layer.
#pragma once
#include <optional>
#include <string>

#include "tessera/nn/norm.h"
#include "tessera/nn/t5_attention.h"
#include "tessera/nn/t5_mlp.h"

namespace tessera::nn {

struct T5LayerShape {
  int64_t hidden_size, num_heads, kv_channels, ffn_hidden_size;
  bool decoder = false;
  bool gated = false;  // gated-gelu feed-forward (else relu)
  double hidden_dropout, attention_dropout, layernorm_epsilon;
  double init_factor = 1.0;  // HF's initializer_factor (nn/t5_attention.h, nn/t5_mlp.h)
};

class T5Layer {
 public:
  struct Saved {
    Norm::Saved ln1, ln_cross, ln2;
    T5Attention::Saved self, cross;
    T5Mlp::Saved mlp;
  };
  T5Layer(ParameterStore& store, const std::string& name, const T5LayerShape& shape,
          const parallel::TensorParallel& tp = {});
  // x [s*b, h] (SP: this rank's rows); bias [nh/tp, s, s]; padding u8 [b, s] or undefined; memory (decoder):
  // the encoder output [sm*b, h] (SP: this rank's rows) with its padding memory_padding u8 [b, sm].
  Tensor forward(Arena& arena, const Tensor& x, int64_t seq, int64_t batch, const Tensor& bias, const Tensor& padding,
                 const Tensor& memory, int64_t memory_seq, const Tensor& memory_padding, const DropoutContext& dropout,
                 Saved& saved) const;
  // Returns d(x); accumulates dbias and (decoder) d(memory).
  Tensor backward(Arena& arena, const Tensor& dout, int64_t seq, int64_t batch, int64_t memory_seq,
                  const DropoutContext& dropout, const Saved& saved, const Tensor& dbias, const Tensor& dmemory) const;

 private:
  std::string name_;
  T5LayerShape shape_;
  parallel::TensorParallel tp_;
  Norm ln1_;
  T5Attention self_;
  std::optional<Norm> ln_cross_;
  std::optional<T5Attention> cross_;
  Norm ln2_;
  T5Mlp mlp_;
};

}  // namespace tessera::nn
