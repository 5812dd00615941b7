// GPT input embedding: word embedding (shared with the output layer when tied) plus learned
// absolute position embedding, then embedding dropout. ids are sequence-major [s, b].
// Tensor parallel (Megatron's VocabParallelEmbedding): the padded vocabulary is split in
// contiguous row blocks, rank r owning [r V/tp, (r+1) V/tp); ids outside give zero rows and the
// partial lookups are all-reduced, or reduce-scattered to s*b/tp tokens under sequence
// parallelism. Position embeddings are replicated.
#pragma once
#include <string>

#include "tessera/nn/dropout_context.h"
#include "tessera/nn/parameter_store.h"
#include "tessera/tensor_parallel/tp_group.h"

namespace tessera::nn {

class GPTEmbedding {
 public:
  // max_positions = 0: no position table (the model's positions come from RoPE or ALiBi, or none).
  // num_token_types > 0: a token-type table embedding.tokentype_embeddings.weight [types, h] (BERT),
  // replicated like the position table, added before dropout.
  GPTEmbedding(ParameterStore& store, int64_t padded_vocab, int64_t max_positions, int64_t hidden, double init_std,
               double dropout, const parallel::TensorParallel& tp = {}, int64_t num_token_types = 0);
  // ids, positions (and token_types with a token-type table): i32 [s*b]; returns [s*b, h]
  // ([s*b/tp, h] under sequence parallelism).
  Tensor forward(Arena& arena, const Tensor& ids, const Tensor& positions, const DropoutContext& dropout,
                 const Tensor& token_types = Tensor()) const;
  void backward(Arena& arena, const Tensor& dout, const Tensor& ids, const Tensor& positions,
                const DropoutContext& dropout, const Tensor& token_types = Tensor()) const;
  int word_embeddings() const { return word_; }
  int64_t vocab_start() const { return vocab_start_; }  // first vocabulary row this rank holds
  int64_t local_vocab() const { return local_vocab_; }

 private:
  ParameterStore* store_;
  parallel::TensorParallel tp_;
  int word_, position_ = -1, token_type_ = -1;  // -1: no position / token-type table
  int64_t hidden_;
  int64_t vocab_start_ = 0, local_vocab_ = 0;
  double dropout_;
};

}  // namespace tessera::nn
