// T5's relative position bias (ops/relative_position_bias.h): a learned table weight
// [num_buckets, heads] (HF's relative_attention_bias.weight) turned into the score bias
// [heads, sq, sk] of one attention. T5 computes it once per stack, in the first layer, and every
// layer of the stack adds the same bias: the model calls forward once, passes the bias to each
// layer, sums their bias gradients and calls backward once. Bidirectional for the encoder, causal
// for the decoder. Tensor parallel: the heads are split, rank r holds columns
// [r nh/tp, (r+1) nh/tp) of the table (the bias of its own heads; no communication).
#pragma once
#include <string>

#include "tessera/core/buffer.h"
#include "tessera/nn/parameter_store.h"
#include "tessera/tensor_parallel/tp_group.h"

namespace tessera::nn {

class RelativePositionBias {
 public:
  struct Saved {
    Tensor buckets;  // i32 [sq, sk] on the model's device
  };
  RelativePositionBias(ParameterStore& store, const std::string& name, int64_t num_buckets, int64_t max_distance,
                       int64_t num_heads, bool bidirectional, double init_std, const parallel::TensorParallel& tp = {});
  // The bias [nh/tp, sq, sk] for queries at positions query_offset + i and keys at j.
  Tensor forward(Arena& arena, int64_t sq, int64_t sk, int64_t query_offset, Saved& saved) const;
  // Adds d(weight) for the bias gradient dbias [nh/tp, sq, sk] to the store's gradient.
  void backward(Arena& arena, const Tensor& dbias, const Saved& saved) const;
  int64_t local_heads() const { return local_heads_; }

 private:
  ParameterStore* store_;
  int weight_ = -1;
  int64_t num_buckets_, max_distance_, local_heads_;
  bool bidirectional_;
};

}  // namespace tessera::nn
