#include "tessera/nn/self_attention.h"

#include "tessera/ops/cached_attention.h"
#include "tessera/ops/flash_attention.h"
#include "tessera/ops/rope.h"

namespace tessera::nn {

namespace {
int64_t checked_head_dim(const std::string& name, const AttentionShape& shape, const parallel::TensorParallel& tp) {
  TESSERA_CHECK(shape.num_query_groups % tp.size == 0, name, ": ", shape.num_query_groups,
                " query groups not divisible by the tensor-parallel size ", tp.size);
  return shape.hidden_size / shape.num_heads;
}
}  // namespace

SelfAttention::SelfAttention(ParameterStore& store, const std::string& name, const AttentionShape& shape,
                             double init_std, double output_init_std, const parallel::TensorParallel& tp)
    : name_(name),
      shape_(shape),
      tp_(tp),
      qkv_(store, name + ".linear_qkv", shape.hidden_size,
           (shape.num_heads + 2 * shape.num_query_groups) * checked_head_dim(name, shape, tp), shape.bias, init_std, tp),
      proj_(store, name + ".linear_proj", shape.hidden_size, shape.hidden_size, shape.bias, output_init_std, tp) {}

ops::AttentionParams SelfAttention::params(const DropoutContext& dropout, const Tensor& document_ids) const {
  ops::AttentionParams p;
  p.num_heads = shape_.num_heads / tp_.size;
  p.num_query_groups = shape_.num_query_groups / tp_.size;
  p.head_dim = shape_.hidden_size / shape_.num_heads;
  p.causal = shape_.causal;
  p.dropout = dropout.training ? shape_.attention_dropout : 0.0;
  // This rank's heads are heads [rank * na/tp, (rank + 1) * na/tp) of the unsplit attention: draw
  // their dropout masks by the unsplit probs index, as TP = 1 does.
  p.dropout_heads = shape_.num_heads;
  p.dropout_first_head = tp_.rank * p.num_heads;
  p.alibi = shape_.alibi;
  p.alibi_heads = shape_.num_heads;
  p.alibi_first_head = tp_.rank * p.num_heads;
  p.document_ids = document_ids;
  return p;
}

void SelfAttention::rotate(const Tensor& qkv_rows, const Tensor& positions, bool inverse) const {
  const int64_t hn = shape_.hidden_size / shape_.num_heads, groups = shape_.num_query_groups / tp_.size;
  const int64_t hpg = shape_.num_heads / shape_.num_query_groups;
  ops::RopeHeads q;
  q.offset = 0, q.heads = hpg, q.head_dim = hn, q.groups = groups, q.group_stride = (hpg + 2) * hn;
  q.rotary_dim = shape_.rotary.rotary_dim, q.interleaved = shape_.rotary.interleaved;
  ops::RopeHeads k = q;
  k.offset = hpg * hn, k.heads = 1;
  if (inverse) {
    ops::rope_backward_rows(qkv_rows, q, positions, shape_.rotary.base);
    ops::rope_backward_rows(qkv_rows, k, positions, shape_.rotary.base);
  } else {
    ops::rope_forward_rows(qkv_rows, q, positions, shape_.rotary.base);
    ops::rope_forward_rows(qkv_rows, k, positions, shape_.rotary.base);
  }
}

RandomStream SelfAttention::dropout_stream(const DropoutContext& dropout) const {
  // One stream for every TP rank: params() places this rank's heads in the unsplit index space.
  return dropout.stream(name_ + ".attention_dropout");
}

Tensor SelfAttention::forward(Arena& arena, const Tensor& in, int64_t seq, int64_t batch,
                              const Tensor& key_padding_mask, const DropoutContext& dropout, Saved& saved,
                              const Tensor& positions, const Tensor& document_ids, const ForwardScratch& scratch,
                              const Tensor& residual) const {
  auto p = params(dropout, document_ids);
  saved.document_ids = document_ids;
  saved.qkv = qkv_.forward(arena, in, saved.in);
  const Tensor qkv = saved.qkv.view({seq, batch, saved.qkv.dim(1)});
  saved.positions = positions;
  if (shape_.rotary.enabled) rotate(qkv, positions, false);  // saved.qkv keeps the rotated q and k
  saved.context = arena.allocate(in.dtype(), {seq, batch, p.num_heads * p.head_dim});
  if (ops::flash_attention_supported(qkv, p)) {  // fused kernels: no [b, na, s, s] probs
    saved.probs = Tensor();
    saved.lse = arena.allocate(DType::f32, {batch, p.num_heads, seq});
    saved.key_padding_mask = key_padding_mask;
    const RandomStream stream = dropout_stream(dropout);
    const int64_t record_words = ops::flash_attention_dropout_record_words(qkv, p);
    saved.dropout_record = record_words > 0 ? arena.allocate(DType::i32, {record_words}) : Tensor();
    ops::flash_attention_forward(qkv, key_padding_mask, p, saved.context, saved.lse, &stream, saved.dropout_record);
  } else {
    saved.lse = Tensor();
    saved.key_padding_mask = scratch.drop_recomputable ? key_padding_mask : Tensor();
    Tensor probs = scratch.for_recomputable(arena).allocate(in.dtype(), {batch, p.num_heads, seq, seq});
    ops::attention_forward(qkv, key_padding_mask, p, dropout_stream(dropout), saved.context, probs);
    saved.probs = scratch.drop_recomputable ? Tensor() : probs;
  }
  const Tensor context = saved.context.view({seq * batch, p.num_heads * p.head_dim});
  if (residual.defined()) return proj_.forward(arena, context, residual);
  return proj_.forward(scratch.for_transient(arena), context);
}

Tensor SelfAttention::recompute_probs(Arena& arena, int64_t seq, int64_t batch, const DropoutContext& dropout,
                                      const Saved& saved) const {
  auto p = params(dropout, saved.document_ids);
  Tensor probs = arena.allocate(saved.qkv.dtype(), {batch, p.num_heads, seq, seq});
  Tensor context = arena.allocate(saved.qkv.dtype(), saved.context.shape());  // equal to saved.context
  ops::attention_forward(saved.qkv.view({seq, batch, saved.qkv.dim(1)}), saved.key_padding_mask, p,
                         dropout_stream(dropout), context, probs);
  return probs;
}

Tensor SelfAttention::backward(Arena& arena, const Tensor& dout, int64_t seq, int64_t batch,
                               const DropoutContext& dropout, const Saved& saved) const {
  auto p = params(dropout, saved.document_ids);
  int64_t local_hidden = p.num_heads * p.head_dim;
  Tensor context = saved.context.view({seq * batch, local_hidden});
  Tensor dcontext = proj_.backward(arena, dout, context);
  Tensor dqkv = arena.allocate(dout.dtype(), {seq, batch, saved.qkv.dim(1)});
  if (saved.lse.defined()) {
    const RandomStream stream = dropout_stream(dropout);  // the forward's masks again (or its record of them)
    ops::flash_attention_backward(dcontext.view({seq, batch, local_hidden}),
                                  saved.qkv.view({seq, batch, saved.qkv.dim(1)}), saved.context, saved.lse,
                                  saved.key_padding_mask, p, dqkv, &stream, saved.dropout_record);
  } else
    ops::attention_backward(dcontext.view({seq, batch, local_hidden}), saved.qkv.view({seq, batch, saved.qkv.dim(1)}),
                            saved.probs.data() ? saved.probs : recompute_probs(arena, seq, batch, dropout, saved), p,
                            dropout_stream(dropout), dqkv);
  if (shape_.rotary.enabled) rotate(dqkv, saved.positions, true);  // d(q, k before rotation)
  return qkv_.backward(arena, dqkv.view({seq * batch, saved.qkv.dim(1)}), saved.in);
}

int64_t SelfAttention::qkv_width() const {
  return (shape_.num_heads + 2 * shape_.num_query_groups) / tp_.size * (shape_.hidden_size / shape_.num_heads);
}

int64_t SelfAttention::kv_width() const {
  return shape_.num_query_groups / tp_.size * (shape_.hidden_size / shape_.num_heads);
}

Tensor SelfAttention::forward_cached(Arena& arena, const Tensor& in, int64_t tokens, int64_t batch,
                                     const Tensor& key_mask, const KvCacheSlot& cache, int64_t past,
                                     const Tensor& positions) const {
  Tensor total_input;
  Tensor context = attend_cached(arena, qkv_.forward(arena, in, total_input), tokens, batch, key_mask, cache, past,
                                 positions);
  return proj_.forward(arena, context);
}

Tensor SelfAttention::attend_cached(Arena& arena, const Tensor& qkv_rows, int64_t tokens, int64_t batch,
                                    const Tensor& key_mask, const KvCacheSlot& cache, int64_t past,
                                    const Tensor& positions) const {
  auto p = params(DropoutContext{});
  Tensor qkv = qkv_rows.view({tokens, batch, qkv_width()});
  if (shape_.rotary.enabled) {  // the new q and k at their positions, before k enters the cache
    TESSERA_CHECK(positions.data() != nullptr, name_, ": RoPE generation needs the new tokens' position ids");
    rotate(qkv, positions, false);
  }
  Tensor context = arena.allocate(qkv.dtype(), {tokens, batch, p.num_heads * p.head_dim});
  ops::cached_attention_forward(qkv, key_mask, p, cache.k, cache.v, past, context, cache.past);
  return context.view({tokens * batch, p.num_heads * p.head_dim});
}

}  // namespace tessera::nn
