#include "tessera/nn/gpt_embedding.h"

#include "tessera/ops/dropout.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/embedding.h"

namespace tessera::nn {

GPTEmbedding::GPTEmbedding(ParameterStore& store, int64_t padded_vocab, int64_t max_positions, int64_t hidden,
                           double init_std, double dropout)
    : store_(&store), hidden_(hidden), dropout_(dropout) {
  word_ = store.add("embedding.word_embeddings.weight", {padded_vocab, hidden}, Init::normal, init_std, true);
  position_ = store.add("embedding.position_embeddings.weight", {max_positions, hidden}, Init::normal, init_std, true);
}

Tensor GPTEmbedding::forward(Arena& arena, const Tensor& ids, const Tensor& positions,
                             const DropoutContext& dropout) const {
  int64_t n = ids.numel();
  Tensor words = arena.allocate(store_->dtype(), {n, hidden_});
  Tensor pos = arena.allocate(store_->dtype(), {n, hidden_});
  ops::embedding_forward(ids, store_->value(word_), words);
  ops::embedding_forward(positions, store_->value(position_), pos);
  ops::add_inplace(words, pos);
  if (dropout.training && dropout_ > 0)
    ops::dropout_forward(words, dropout_, dropout.stream("embedding.dropout"), 0, words);
  return words;
}

void GPTEmbedding::backward(Arena& arena, const Tensor& dout, const Tensor& ids, const Tensor& positions,
                            const DropoutContext& dropout) const {
  Tensor d = dout;
  if (dropout.training && dropout_ > 0) {
    d = arena.allocate(dout.dtype(), dout.shape());
    ops::dropout_backward(dout, dropout_, dropout.stream("embedding.dropout"), 0, d);
  }
  ops::embedding_backward(ids, d, store_->grad(word_));
  ops::embedding_backward(positions, d, store_->grad(position_));
}

}  // namespace tessera::nn
