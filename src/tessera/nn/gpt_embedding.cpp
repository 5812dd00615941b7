#include "tessera/nn/gpt_embedding.h"

#include <cstring>

#include "tessera/ops/dropout.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/embedding.h"
#include "tessera/parallel/tp_mappings.h"

namespace tessera::nn {

namespace {

// out[i] = table[ids[i] - start] for ids in [start, start + rows), zero rows elsewhere.
template <typename T>
void partial_lookup(const Tensor& ids, const Tensor& table, int64_t start, const Tensor& out) {
  const int32_t* id = ids.data_as<int32_t>();
  const T* w = table.data_as<T>();
  T* y = out.data_as<T>();
  int64_t rows = table.dim(0), h = table.dim(1);
  for (int64_t i = 0; i < ids.numel(); ++i) {
    int64_t local = static_cast<int64_t>(id[i]) - start;
    if (local >= 0 && local < rows) std::memcpy(y + i * h, w + local * h, static_cast<size_t>(h) * sizeof(T));
    else std::memset(y + i * h, 0, static_cast<size_t>(h) * sizeof(T));
  }
}

// dtable[ids[i] - start] += dout[i] for the ids this rank holds.
template <typename T>
void partial_scatter_add(const Tensor& ids, const Tensor& dout, int64_t start, const Tensor& dtable) {
  const int32_t* id = ids.data_as<int32_t>();
  const T* d = dout.data_as<T>();
  T* g = dtable.data_as<T>();
  int64_t rows = dtable.dim(0), h = dtable.dim(1);
  for (int64_t i = 0; i < ids.numel(); ++i) {
    int64_t local = static_cast<int64_t>(id[i]) - start;
    if (local < 0 || local >= rows) continue;
    for (int64_t j = 0; j < h; ++j) g[local * h + j] += d[i * h + j];
  }
}

}  // namespace

GPTEmbedding::GPTEmbedding(ParameterStore& store, int64_t padded_vocab, int64_t max_positions, int64_t hidden,
                           double init_std, double dropout, const parallel::TensorParallel& tp)
    : store_(&store), tp_(tp), hidden_(hidden), dropout_(dropout) {
  TESSERA_CHECK(padded_vocab % tp.size == 0, "padded vocabulary ", padded_vocab,
                " not divisible by the tensor-parallel size ", tp.size);
  local_vocab_ = padded_vocab / tp.size;
  vocab_start_ = local_vocab_ * tp.rank;
  word_ = store.add("embedding.word_embeddings.weight", {local_vocab_, hidden}, Init::normal, init_std, true,
                    Sharding::split(0, padded_vocab, tp.size, tp.rank));
  Sharding replicated;
  replicated.sequence_parallel = tp.sequence_parallel;  // each rank adds it to its own tokens only
  position_ = store.add("embedding.position_embeddings.weight", {max_positions, hidden}, Init::normal, init_std, true,
                        replicated);
}

Tensor GPTEmbedding::forward(Arena& arena, const Tensor& ids, const Tensor& positions,
                             const DropoutContext& dropout) const {
  int64_t n = ids.numel();
  Tensor words = arena.allocate(store_->dtype(), {n, hidden_});
  if (!tp_.enabled()) {
    ops::embedding_forward(ids, store_->value(word_), words);
  } else {
    if (store_->dtype() == DType::f32) partial_lookup<float>(ids, store_->value(word_), vocab_start_, words);
    else if (store_->dtype() == DType::f64) partial_lookup<double>(ids, store_->value(word_), vocab_start_, words);
    else TESSERA_FAIL("vocab-parallel embedding: unsupported dtype ", dtype_name(store_->dtype()));
    words = tp_.sequence_parallel ? parallel::reduce_scatter_to_sp_forward(arena, words, tp_)
                                  : parallel::reduce_from_tp_forward(arena, words, tp_);
  }
  int64_t rows = tp_.local_rows(n), first = tp_.first_row(n);
  Tensor pos = arena.allocate(store_->dtype(), {rows, hidden_});
  ops::embedding_forward(positions.rows(first, first + rows), store_->value(position_), pos);
  ops::add_inplace(words, pos);
  if (dropout.training && dropout_ > 0)
    ops::dropout_forward(words, dropout_, dropout.stream("embedding.dropout"), static_cast<uint64_t>(first * hidden_),
                         words);
  return words;
}

void GPTEmbedding::backward(Arena& arena, const Tensor& dout, const Tensor& ids, const Tensor& positions,
                            const DropoutContext& dropout) const {
  int64_t n = ids.numel(), rows = tp_.local_rows(n), first = tp_.first_row(n);
  Tensor d = dout;
  if (dropout.training && dropout_ > 0) {
    d = arena.allocate(dout.dtype(), dout.shape());
    ops::dropout_backward(dout, dropout_, dropout.stream("embedding.dropout"), static_cast<uint64_t>(first * hidden_),
                          d);
  }
  ops::embedding_backward(positions.rows(first, first + rows), d, store_->grad(position_));
  if (!tp_.enabled()) {
    ops::embedding_backward(ids, d, store_->grad(word_));
    return;
  }
  Tensor dwords = tp_.sequence_parallel ? parallel::reduce_scatter_to_sp_backward(arena, d, tp_)
                                        : parallel::reduce_from_tp_backward(d, tp_);
  if (store_->dtype() == DType::f32) partial_scatter_add<float>(ids, dwords, vocab_start_, store_->grad(word_));
  else partial_scatter_add<double>(ids, dwords, vocab_start_, store_->grad(word_));
}

}  // namespace tessera::nn
