#include "tessera/nn/t5_attention.h"

#include <cmath>

#include "tessera/core/error.h"
#include "tessera/ops/elementwise.h"

namespace tessera::nn {

namespace {
double inverse_sqrt(int64_t n) { return 1.0 / std::sqrt(static_cast<double>(n)); }
}  // namespace

// HF's T5 initialisation (initializer_factor f): q ~ N(0, f (d_model d_kv)^-1/2) (the 1/sqrt(d_kv) the
// scores lack), k, v ~ N(0, f d_model^-1/2), o ~ N(0, f (heads d_kv)^-1/2).
T5Attention::T5Attention(ParameterStore& store, const std::string& name, const T5AttentionShape& shape,
                         double init_factor, const parallel::TensorParallel& tp)
    : name_(name),
      shape_(shape),
      tp_(tp),
      local_heads_(shape.num_heads / tp.size),
      q_(store, name + ".linear_q", shape.hidden_size, shape.num_heads * shape.kv_channels, false,
         init_factor * inverse_sqrt(shape.hidden_size * shape.kv_channels), tp),
      k_(store, name + ".linear_k", shape.hidden_size, shape.num_heads * shape.kv_channels, false,
         init_factor * inverse_sqrt(shape.hidden_size), tp),
      v_(store, name + ".linear_v", shape.hidden_size, shape.num_heads * shape.kv_channels, false,
         init_factor * inverse_sqrt(shape.hidden_size), tp),
      proj_(store, name + ".linear_proj", shape.num_heads * shape.kv_channels, shape.hidden_size, false,
            init_factor * inverse_sqrt(shape.num_heads * shape.kv_channels), tp) {
  TESSERA_CHECK(shape.num_heads % tp.size == 0, name, ": ", shape.num_heads, " heads do not split over TP = ", tp.size);
}

ops::BiasedAttentionParams T5Attention::params(int64_t batch, const DropoutContext& dropout) const {
  ops::BiasedAttentionParams p;
  p.batch = batch;
  p.num_heads = local_heads_;
  p.head_dim = shape_.kv_channels;
  p.causal = shape_.causal;
  p.dropout = dropout.training ? shape_.attention_dropout : 0.0;
  p.dropout_heads = shape_.num_heads;
  p.dropout_first_head = tp_.rank * local_heads_;
  return p;
}

Tensor T5Attention::forward(Arena& arena, const Tensor& x, const Tensor& memory, int64_t sq, int64_t sk,
                            int64_t batch, const Tensor& bias, const Tensor& key_padding_mask,
                            const DropoutContext& dropout, Saved& saved) const {
  const Tensor& kv_source = shape_.cross ? memory : x;
  TESSERA_CHECK(kv_source.data() != nullptr, name_, ": cross-attention needs the encoder's output");
  saved.q = q_.forward(arena, x, saved.q_in);
  saved.k = k_.forward(arena, kv_source, saved.kv_in);
  Tensor kv_in_again;
  saved.v = v_.forward(arena, kv_source, kv_in_again);
  TESSERA_CHECK(saved.q.dim(0) == sq * batch && saved.k.dim(0) == sk * batch, name_, ": expected ", sq, " x ", batch,
                " query rows and ", sk, " x ", batch, " key rows, got ", saved.q.dim(0), " and ", saved.k.dim(0));
  saved.key_padding_mask = key_padding_mask;
  saved.context = arena.allocate(saved.q.dtype(), saved.q.shape());
  saved.probs = arena.allocate(saved.q.dtype(), {batch, local_heads_, sq, sk});
  const ops::BiasedAttentionParams p = params(batch, dropout);
  ops::biased_attention_forward(saved.q, saved.k, saved.v, bias, key_padding_mask, p,
                                dropout.stream(name_ + ".attention_dropout"), saved.context, saved.probs);
  return proj_.forward(arena, saved.context);
}

Tensor T5Attention::backward(Arena& arena, const Tensor& dout, int64_t sq, int64_t sk, int64_t batch,
                             const DropoutContext& dropout, const Saved& saved, const Tensor& dbias,
                             const Tensor& dmemory) const {
  (void)sq;
  (void)sk;
  Tensor dcontext = proj_.backward(arena, dout, saved.context);
  Tensor dq = arena.allocate(saved.q.dtype(), saved.q.shape());
  Tensor dk = arena.allocate(saved.k.dtype(), saved.k.shape());
  Tensor dv = arena.allocate(saved.v.dtype(), saved.v.shape());
  ops::biased_attention_backward(dcontext, saved.q, saved.k, saved.v, saved.probs, params(batch, dropout),
                                 dropout.stream(name_ + ".attention_dropout"), dq, dk, dv, dbias);
  Tensor dx = q_.backward(arena, dq, saved.q_in);
  Tensor dkv = k_.backward(arena, dk, saved.kv_in);
  ops::add_inplace(dkv, v_.backward(arena, dv, saved.kv_in));
  if (shape_.cross) {
    TESSERA_CHECK(dmemory.data() != nullptr, name_, ": cross-attention backward needs d(memory)");
    ops::add_inplace(dmemory, dkv);
  } else {
    ops::add_inplace(dx, dkv);
  }
  return dx;
}

}  // namespace tessera::nn
