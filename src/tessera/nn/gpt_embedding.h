// GPT input embedding: word embedding (shared with the output layer when tied) plus learned
// absolute position embedding, then embedding dropout. ids are sequence-major [s, b].
#pragma once
#include <string>

#include "tessera/nn/dropout_context.h"
#include "tessera/nn/parameter_store.h"

namespace tessera::nn {

class GPTEmbedding {
 public:
  GPTEmbedding(ParameterStore& store, int64_t padded_vocab, int64_t max_positions, int64_t hidden, double init_std,
               double dropout);
  // ids, positions: i32 [s*b]; returns [s*b, h].
  Tensor forward(Arena& arena, const Tensor& ids, const Tensor& positions, const DropoutContext& dropout) const;
  void backward(Arena& arena, const Tensor& dout, const Tensor& ids, const Tensor& positions,
                const DropoutContext& dropout) const;
  int word_embeddings() const { return word_; }

 private:
  ParameterStore* store_;
  int word_, position_;
  int64_t hidden_;
  double dropout_;
};

}  // namespace tessera::nn
