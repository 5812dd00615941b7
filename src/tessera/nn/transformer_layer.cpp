#include "tessera/nn/transformer_layer.h"

#include "tessera/ops/bias_dropout_add.h"
#include "tessera/ops/decode_linear.h"
#include "tessera/ops/dropout.h"

namespace tessera::nn {

TransformerLayer::TransformerLayer(ParameterStore& store, const std::string& name, const TransformerLayerShape& shape,
                                   const parallel::TensorParallel& tp, const ExpertParallel& ep)
    : name_(name),
      hidden_dropout_(shape.hidden_dropout),
      tp_(tp),
      ln1_(store, name + ".input_layernorm", shape.attention.hidden_size, shape.layernorm_epsilon, shape.norm,
           tp.sequence_parallel),
      attention_(store, name + ".self_attention", shape.attention, shape.init_std, shape.output_init_std, tp),
      ln2_(store, name + ".pre_mlp_layernorm", shape.attention.hidden_size, shape.layernorm_epsilon, shape.norm,
           tp.sequence_parallel) {
  if (shape.moe.num_experts > 0)
    moe_ = std::make_unique<MoeLayer>(store, name + ".mlp", shape.attention.hidden_size, shape.moe, shape.init_std,
                                      shape.output_init_std, tp, shape.mlp, ep);
  else
    mlp_ = std::make_unique<MLP>(store, name + ".mlp", shape.attention.hidden_size, shape.ffn_hidden_size,
                                 shape.init_std, shape.output_init_std, tp, shape.mlp);
}

namespace {
// residual + dropout(branch) (the linear's bias is already in branch: its GEMM epilogue adds it).
// index_offset: the global flat index of the branch's first element (SP: this rank's first token).
Tensor dropout_add(Arena& arena, const Tensor& branch, const Tensor& residual, double p, const RandomStream& stream,
                   uint64_t index_offset) {
  Tensor out = arena.allocate(branch.dtype(), branch.shape());
  ops::bias_dropout_add_forward(branch, Tensor(), residual, p, stream, index_offset, out);  // one fused pass
  return out;
}
Tensor dropout_grad(Arena& arena, const Tensor& dout, double p, const RandomStream& stream, uint64_t index_offset) {
  if (p == 0) return dout;
  Tensor d = arena.allocate(dout.dtype(), dout.shape());
  ops::dropout_backward(dout, p, stream, index_offset, d);
  return d;
}
}  // namespace

Tensor TransformerLayer::forward(Arena& arena, const Tensor& in, int64_t seq, int64_t batch,
                                 const Tensor& key_padding_mask, const DropoutContext& dropout, Saved& saved,
                                 const Tensor& positions, const Tensor& document_ids, const ForwardScratch& scratch) const {
  double p = dropout.training ? hidden_dropout_ : 0.0;
  auto offset = static_cast<uint64_t>(tp_.first_row(seq * batch) * in.dim(1));
  Tensor x = ln1_.forward(arena, in, saved.ln1);
  // Without hidden dropout the residual adds run in the output projections' GEMMs (one rounding).
  const bool residual_in_gemm = p == 0.0;
  Tensor h;
  if (residual_in_gemm) {
    h = attention_.forward(arena, x, seq, batch, key_padding_mask, dropout, saved.attention, positions, document_ids,
                           scratch, in);
  } else {
    Tensor a = attention_.forward(arena, x, seq, batch, key_padding_mask, dropout, saved.attention, positions,
                                  document_ids, scratch);
    h = dropout_add(arena, a, in, p, dropout.stream(name_ + ".attention_output_dropout"), offset);
  }
  Tensor y = ln2_.forward(arena, h, saved.ln2);
  if (mlp_ && residual_in_gemm) return mlp_->forward(arena, y, saved.mlp, scratch, h);
  Tensor m = moe_ ? moe_->forward(arena, y, saved.moe) : mlp_->forward(arena, y, saved.mlp, scratch);
  return dropout_add(arena, m, h, p, dropout.stream(name_ + ".mlp_output_dropout"), offset);
}

Tensor TransformerLayer::forward_cached(Arena& arena, const Tensor& in, int64_t tokens, int64_t batch,
                                        const Tensor& key_mask, const KvCacheSlot& cache, int64_t past,
                                        const Tensor& positions) const {
  TESSERA_CHECK(!tp_.sequence_parallel, name_, ": generation does not run with sequence parallelism");
  if (Tensor fused = forward_cached_fused(arena, in, tokens, batch, key_mask, cache, past, positions); fused.defined())
    return fused;
  Saved saved;
  const RandomStream unused = DropoutContext{}.stream(name_);  // p = 0: no mask is drawn
  Tensor x = ln1_.forward(arena, in, saved.ln1);
  Tensor a = attention_.forward_cached(arena, x, tokens, batch, key_mask, cache, past, positions);
  Tensor h = dropout_add(arena, a, in, 0.0, unused, 0);
  Tensor y = ln2_.forward(arena, h, saved.ln2);
  Tensor m = moe_ ? moe_->forward(arena, y, saved.moe) : mlp_->forward(arena, y, saved.mlp);
  return dropout_add(arena, m, h, 0.0, unused, 0);
}

Tensor TransformerLayer::forward_cached_fused(Arena& arena, const Tensor& in, int64_t tokens, int64_t batch,
                                              const Tensor& key_mask, const KvCacheSlot& cache, int64_t past,
                                              const Tensor& positions) const {
  constexpr int64_t kMaxRows = 8;  // kernels' kSkinnyMaxRows
  const LayerNorm* ln1 = ln1_.layernorm();
  const LayerNorm* ln2 = ln2_.layernorm();
  const bool half = in.dtype() == DType::bf16 || in.dtype() == DType::f16;
  if (!in.device().is_cuda() || !half || in.ndim() != 2 || in.dim(0) > kMaxRows || moe_ || !mlp_ || mlp_->swiglu() ||
      tp_.enabled() || !ln1 || !ln2 || !ops::decode_switches().fusion)
    return Tensor();
  const int64_t rows = in.dim(0), hidden = in.dim(1);
  const auto& qkv_linear = attention_.qkv_linear();
  const auto& proj_linear = attention_.proj_linear();
  const auto& fc1 = mlp_->fc1();
  const auto& fc2 = mlp_->fc2();
  // [LN1 + QKV]
  ops::DecodeLinear d{ln1->weight(), ln1->bias(), ln1->eps(), qkv_linear.weight(), qkv_linear.bias(),
                      ops::DecodeEpilogue::none, Tensor()};
  Tensor qkv = arena.allocate(in.dtype(), {rows, d.weight.dim(0)});
  ops::decode_linear_forward(arena, in, d, qkv);
  Tensor context = attention_.attend_cached(arena, qkv, tokens, batch, key_mask, cache, past, positions);
  // [proj + residual]: h = in + proj(context)
  d = {Tensor(), Tensor(), 0.0, proj_linear.weight(), proj_linear.bias(), ops::DecodeEpilogue::residual_add, in};
  Tensor h = arena.allocate(in.dtype(), {rows, hidden});
  ops::decode_linear_forward(arena, context, d, h);
  // [LN2 + fc1 + GeLU]
  d = {ln2->weight(), ln2->bias(), ln2->eps(), fc1.weight(), fc1.bias(),
       mlp_->gelu_erf() ? ops::DecodeEpilogue::gelu_erf : ops::DecodeEpilogue::gelu_tanh, Tensor()};
  Tensor activation = arena.allocate(in.dtype(), {rows, d.weight.dim(0)});
  ops::decode_linear_forward(arena, h, d, activation);
  // [fc2 + residual]: out = h + fc2(activation)
  d = {Tensor(), Tensor(), 0.0, fc2.weight(), fc2.bias(), ops::DecodeEpilogue::residual_add, h};
  Tensor out = arena.allocate(in.dtype(), {rows, hidden});
  ops::decode_linear_forward(arena, activation, d, out);
  return out;
}

Tensor TransformerLayer::backward(Arena& arena, const Tensor& dout, int64_t seq, int64_t batch,
                                  const DropoutContext& dropout, const Saved& saved, double aux_loss_scale) const {
  double p = dropout.training ? hidden_dropout_ : 0.0;
  auto offset = static_cast<uint64_t>(tp_.first_row(seq * batch) * dout.dim(1));
  // out = h + drop(mlp(ln2(h)))
  Tensor dm = dropout_grad(arena, dout, p, dropout.stream(name_ + ".mlp_output_dropout"), offset);
  Tensor dy = moe_ ? moe_->backward(arena, dm, saved.moe, aux_loss_scale) : mlp_->backward(arena, dm, saved.mlp);
  Tensor dh = ln2_.backward(arena, dy, saved.ln2, dout);  // + the residual's gradient, in the norm's pass
  // h = in + drop(attn(ln1(in)))
  Tensor da = dropout_grad(arena, dh, p, dropout.stream(name_ + ".attention_output_dropout"), offset);
  Tensor dx = attention_.backward(arena, da, seq, batch, dropout, saved.attention);
  return ln1_.backward(arena, dx, saved.ln1, dh);
}

}  // namespace tessera::nn
