#include "tessera/nn/gpt_embedding.h"

#include <cstring>

#include "tessera/ops/dropout.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/embedding.h"
#include "tessera/ops/half_compute.h"
#include "tessera/tensor_parallel/tp_mappings.h"

#ifdef TESSERA_HAVE_CUDA
#include "tessera/ops/cuda/tp_ops_cuda.h"
#endif

namespace tessera::nn {

namespace {

// out[i] = table[ids[i] - start] for ids in [start, start + rows), zero rows elsewhere. A pure copy, so
// it works on the stored bits of any float dtype (f32, f64, bf16, f16: all-zero bits are +0 in each).
void partial_lookup(const Tensor& ids, const Tensor& table, int64_t start, const Tensor& out) {
#ifdef TESSERA_HAVE_CUDA
  if (table.device().is_cuda()) return ops::cuda::vocab_parallel_embedding_forward(ids, table, start, out);
#endif
  TESSERA_CHECK(dtype_is_floating(table.dtype()) && out.dtype() == table.dtype(),
                "vocab-parallel embedding: table and output must share a float dtype, got ", table.describe(), " and ",
                out.describe());
  const int32_t* id = ids.data_as<int32_t>();
  const auto* w = static_cast<const char*>(table.data());
  auto* y = static_cast<char*>(out.data());
  int64_t rows = table.dim(0);
  auto row_bytes = static_cast<size_t>(table.dim(1)) * dtype_size(table.dtype());
  for (int64_t i = 0; i < ids.numel(); ++i) {
    int64_t local = static_cast<int64_t>(id[i]) - start;
    char* dst = y + static_cast<size_t>(i) * row_bytes;
    if (local >= 0 && local < rows) std::memcpy(dst, w + static_cast<size_t>(local) * row_bytes, row_bytes);
    else std::memset(dst, 0, row_bytes);
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
                           double init_std, double dropout, const parallel::TensorParallel& tp,
                           int64_t num_token_types)
    : store_(&store), tp_(tp), hidden_(hidden), dropout_(dropout) {
  TESSERA_CHECK(padded_vocab % tp.size == 0, "padded vocabulary ", padded_vocab,
                " not divisible by the tensor-parallel size ", tp.size);
  local_vocab_ = padded_vocab / tp.size;
  vocab_start_ = local_vocab_ * tp.rank;
  word_ = store.add("embedding.word_embeddings.weight", {local_vocab_, hidden}, Init::normal, init_std, true,
                    Sharding::split(0, padded_vocab, tp.size, tp.rank));
  store.roles(word_).vocab_axis = 0;
  Sharding replicated;
  replicated.sequence_parallel = tp.sequence_parallel;  // each rank adds it to its own tokens only
  if (num_token_types > 0)
    token_type_ = store.add("embedding.tokentype_embeddings.weight", {num_token_types, hidden}, Init::normal,
                            init_std, true, replicated);
  if (max_positions == 0) return;  // no position table (RoPE, ALiBi or no positions)
  position_ = store.add("embedding.position_embeddings.weight", {max_positions, hidden}, Init::normal, init_std, true,
                        replicated);
  store.roles(position_).position_embedding = true;
}

Tensor GPTEmbedding::forward(Arena& arena, const Tensor& ids, const Tensor& positions,
                             const DropoutContext& dropout, const Tensor& token_types) const {
  int64_t n = ids.numel();
  Tensor words = arena.allocate(store_->dtype(), {n, hidden_});
  if (!tp_.enabled()) {
    ops::embedding_forward(ids, store_->value(word_), words);
  } else {
    partial_lookup(ids, store_->value(word_), vocab_start_, words);
    words = tp_.sequence_parallel ? parallel::reduce_scatter_to_sp_forward(arena, words, tp_)
                                  : parallel::reduce_from_tp_forward(arena, words, tp_);
  }
  int64_t rows = tp_.local_rows(n), first = tp_.first_row(n);
  if (position_ >= 0) {
    Tensor pos = arena.allocate(store_->dtype(), {rows, hidden_});
    ops::embedding_forward(positions.rows(first, first + rows), store_->value(position_), pos);
    ops::add_inplace(words, pos);
  }
  if (token_type_ >= 0) {
    TESSERA_CHECK(token_types.numel() == n, "the token-type embedding needs token types for the ", n, " tokens");
    Tensor types = arena.allocate(store_->dtype(), {rows, hidden_});
    ops::embedding_forward(token_types.rows(first, first + rows), store_->value(token_type_), types);
    ops::add_inplace(words, types);
  }
  if (dropout.training && dropout_ > 0)
    ops::dropout_forward(words, dropout_, dropout.stream("embedding.dropout"), static_cast<uint64_t>(first * hidden_),
                         words);
  return words;
}

void GPTEmbedding::backward(Arena& arena, const Tensor& dout, const Tensor& ids, const Tensor& positions,
                            const DropoutContext& dropout, const Tensor& token_types) const {
  int64_t n = ids.numel(), rows = tp_.local_rows(n), first = tp_.first_row(n);
  Tensor d = dout;
  if (dropout.training && dropout_ > 0) {
    d = arena.allocate(dout.dtype(), dout.shape());
    ops::dropout_backward(dout, dropout_, dropout.stream("embedding.dropout"), static_cast<uint64_t>(first * hidden_),
                          d);
  }
  if (position_ >= 0) ops::embedding_backward(positions.rows(first, first + rows), d, store_->grad(position_));
  if (token_type_ >= 0) ops::embedding_backward(token_types.rows(first, first + rows), d, store_->grad(token_type_));
  if (!tp_.enabled()) {
    ops::embedding_backward(ids, d, store_->grad(word_));
    return;
  }
  Tensor dwords = tp_.sequence_parallel ? parallel::reduce_scatter_to_sp_backward(arena, d, tp_)
                                        : parallel::reduce_from_tp_backward(d, tp_);
  const Tensor& dtable = store_->grad(word_);
#ifdef TESSERA_HAVE_CUDA
  if (dtable.device().is_cuda()) return ops::cuda::vocab_parallel_embedding_backward(ids, dwords, vocab_start_, dtable);
#endif
  TESSERA_CHECK(dwords.dtype() == dtable.dtype(), "vocab-parallel embedding backward: gradient ", dwords.describe(),
                " and table gradient ", dtable.describe(), " differ in dtype");
  if (dtable.dtype() == DType::f32) partial_scatter_add<float>(ids, dwords, vocab_start_, dtable);
  else if (dtable.dtype() == DType::f64) partial_scatter_add<double>(ids, dwords, vocab_start_, dtable);
  else if (ops::detail::is_half(dtable.dtype()))  // bf16 / f16 storage, f32 accumulation
    ops::detail::compute_in_f32({dwords, dtable}, {false, true}, [&](const std::vector<Tensor>& t) {
      partial_scatter_add<float>(ids, t[0], vocab_start_, t[1]);
    });
  else TESSERA_FAIL("vocab-parallel embedding backward: unsupported dtype ", dtype_name(dtable.dtype()),
                    " (allowed: f32, f64, bf16, f16)");
}

}  // namespace tessera::nn
