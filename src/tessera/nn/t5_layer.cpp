#include "tessera/nn/t5_layer.h"

#include "tessera/ops/bias_dropout_add.h"
#include "tessera/ops/dropout.h"
#include "tessera/ops/elementwise.h"

namespace tessera::nn {

namespace {
T5AttentionShape attention_shape(const T5LayerShape& s, bool cross) {
  return {s.hidden_size, s.num_heads, s.kv_channels, s.attention_dropout, s.decoder && !cross, cross};
}
// residual + dropout(branch); index_offset: the global flat index of the branch's first element.
Tensor dropout_add(Arena& arena, const Tensor& branch, const Tensor& residual, double p, const RandomStream& stream,
                   uint64_t index_offset) {
  Tensor out = arena.allocate(branch.dtype(), branch.shape());
  ops::bias_dropout_add_forward(branch, Tensor(), residual, p, stream, index_offset, out);
  return out;
}
Tensor dropout_grad(Arena& arena, const Tensor& dout, double p, const RandomStream& stream, uint64_t index_offset) {
  if (p == 0) return dout;
  Tensor d = arena.allocate(dout.dtype(), dout.shape());
  ops::dropout_backward(dout, p, stream, index_offset, d);
  return d;
}
}  // namespace

T5Layer::T5Layer(ParameterStore& store, const std::string& name, const T5LayerShape& shape,
                 const parallel::TensorParallel& tp)
    : name_(name),
      shape_(shape),
      tp_(tp),
      ln1_(store, name + ".input_layernorm", shape.hidden_size, shape.layernorm_epsilon, NormKind::rmsnorm,
           tp.sequence_parallel),
      self_(store, name + ".self_attention", attention_shape(shape, false), shape.init_factor, tp),
      ln_cross_(shape.decoder ? std::optional<Norm>(std::in_place, store, name + ".pre_cross_attn_layernorm",
                                                    shape.hidden_size, shape.layernorm_epsilon, NormKind::rmsnorm,
                                                    tp.sequence_parallel)
                              : std::nullopt),
      cross_(shape.decoder ? std::optional<T5Attention>(std::in_place, store, name + ".cross_attention",
                                                        attention_shape(shape, true), shape.init_factor, tp)
                           : std::nullopt),
      ln2_(store, name + ".pre_mlp_layernorm", shape.hidden_size, shape.layernorm_epsilon, NormKind::rmsnorm,
           tp.sequence_parallel),
      mlp_(store, name + ".mlp", shape.hidden_size, shape.ffn_hidden_size, shape.gated, shape.hidden_dropout,
           shape.init_factor, tp) {}

Tensor T5Layer::forward(Arena& arena, const Tensor& x, int64_t seq, int64_t batch, const Tensor& bias,
                        const Tensor& padding, const Tensor& memory, int64_t memory_seq, const Tensor& memory_padding,
                        const DropoutContext& dropout, Saved& saved) const {
  const double p = dropout.training ? shape_.hidden_dropout : 0.0;
  const auto offset = static_cast<uint64_t>(tp_.first_row(seq * batch) * x.dim(1));
  Tensor a = self_.forward(arena, ln1_.forward(arena, x, saved.ln1), Tensor(), seq, seq, batch, bias, padding, dropout,
                           saved.self);
  Tensor h = dropout_add(arena, a, x, p, dropout.stream(name_ + ".self_attention_dropout"), offset);
  if (cross_) {
    Tensor c = cross_->forward(arena, ln_cross_->forward(arena, h, saved.ln_cross), memory, seq, memory_seq, batch,
                               Tensor(), memory_padding, dropout, saved.cross);
    h = dropout_add(arena, c, h, p, dropout.stream(name_ + ".cross_attention_dropout"), offset);
  }
  Tensor m = mlp_.forward(arena, ln2_.forward(arena, h, saved.ln2), dropout, saved.mlp);
  return dropout_add(arena, m, h, p, dropout.stream(name_ + ".mlp_dropout"), offset);
}

Tensor T5Layer::backward(Arena& arena, const Tensor& dout, int64_t seq, int64_t batch, int64_t memory_seq,
                         const DropoutContext& dropout, const Saved& saved, const Tensor& dbias,
                         const Tensor& dmemory) const {
  const double p = dropout.training ? shape_.hidden_dropout : 0.0;
  const auto offset = static_cast<uint64_t>(tp_.first_row(seq * batch) * dout.dim(1));
  Tensor dm = dropout_grad(arena, dout, p, dropout.stream(name_ + ".mlp_dropout"), offset);
  Tensor dh = ln2_.backward(arena, mlp_.backward(arena, dm, dropout, saved.mlp), saved.ln2);
  ops::add_inplace(dh, dout);
  if (cross_) {
    Tensor dc = dropout_grad(arena, dh, p, dropout.stream(name_ + ".cross_attention_dropout"), offset);
    Tensor dn = cross_->backward(arena, dc, seq, memory_seq, batch, dropout, saved.cross, Tensor(), dmemory);
    Tensor dh2 = ln_cross_->backward(arena, dn, saved.ln_cross);
    ops::add_inplace(dh2, dh);
    dh = dh2;
  }
  Tensor da = dropout_grad(arena, dh, p, dropout.stream(name_ + ".self_attention_dropout"), offset);
  Tensor dx = ln1_.backward(arena, self_.backward(arena, da, seq, seq, batch, dropout, saved.self, dbias, Tensor()),
                            saved.ln1);
  ops::add_inplace(dx, dh);
  return dx;
}

}  // namespace tessera::nn
