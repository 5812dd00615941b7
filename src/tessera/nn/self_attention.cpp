#include "tessera/nn/self_attention.h"

namespace tessera::nn {

SelfAttention::SelfAttention(ParameterStore& store, const std::string& name, const AttentionShape& shape,
                             double init_std, double output_init_std)
    : name_(name),
      shape_(shape),
      qkv_(store, name + ".linear_qkv", shape.hidden_size,
           (shape.num_heads + 2 * shape.num_query_groups) * (shape.hidden_size / shape.num_heads), true, init_std),
      proj_(store, name + ".linear_proj", shape.hidden_size, shape.hidden_size, true, output_init_std) {}

ops::AttentionParams SelfAttention::params(const DropoutContext& dropout) const {
  ops::AttentionParams p;
  p.num_heads = shape_.num_heads;
  p.num_query_groups = shape_.num_query_groups;
  p.head_dim = shape_.hidden_size / shape_.num_heads;
  p.causal = true;
  p.dropout = dropout.training ? shape_.attention_dropout : 0.0;
  return p;
}

Tensor SelfAttention::forward(Arena& arena, const Tensor& in, int64_t seq, int64_t batch,
                              const Tensor& key_padding_mask, const DropoutContext& dropout, Saved& saved) const {
  auto p = params(dropout);
  saved.in = in;
  saved.qkv = qkv_.forward(arena, in);
  saved.probs = arena.allocate(in.dtype(), {batch, p.num_heads, seq, seq});
  saved.context = arena.allocate(in.dtype(), {seq, batch, p.num_heads * p.head_dim});
  ops::attention_forward(saved.qkv.view({seq, batch, saved.qkv.dim(1)}), key_padding_mask, p,
                         dropout.stream(name_ + ".attention_dropout"), saved.context, saved.probs);
  return proj_.forward(arena, saved.context.view({seq * batch, shape_.hidden_size}));
}

Tensor SelfAttention::backward(Arena& arena, const Tensor& dout, int64_t seq, int64_t batch,
                               const DropoutContext& dropout, const Saved& saved) const {
  auto p = params(dropout);
  Tensor context = saved.context.view({seq * batch, shape_.hidden_size});
  Tensor dcontext = proj_.backward(arena, dout, context);
  Tensor dqkv = arena.allocate(dout.dtype(), {seq, batch, saved.qkv.dim(1)});
  ops::attention_backward(dcontext.view({seq, batch, shape_.hidden_size}), saved.qkv.view({seq, batch, saved.qkv.dim(1)}),
                          saved.probs, p, dropout.stream(name_ + ".attention_dropout"), dqkv);
  return qkv_.backward(arena, dqkv.view({seq * batch, saved.qkv.dim(1)}), saved.in);
}

}  // namespace tessera::nn
