// Linear layer y = x W^T + b with W stored [out, in] in the ParameterStore. Forward returns y from
// the arena; backward accumulates dW and db into the gradient buffer and returns dx.
#pragma once
#include <string>

#include "tessera/core/buffer.h"
#include "tessera/nn/parameter_store.h"

namespace tessera::nn {

class Linear {
 public:
  // sequence_parallel: the layer sees this rank's s*b/tp tokens of a replicated weight, so its
  // parameters are flagged for the TP gradient all-reduce (as LayerNorm's).
  Linear(ParameterStore& store, const std::string& name, int64_t in_features, int64_t out_features, bool bias,
         double init_std, bool sequence_parallel = false);
  Tensor forward(Arena& arena, const Tensor& in) const;                      // in [n, in] -> [n, out]
  Tensor backward(Arena& arena, const Tensor& dout, const Tensor& in) const;  // -> din [n, in]
  const Tensor& weight() const { return store_->value(weight_); }

 private:
  ParameterStore* store_;
  int weight_ = -1;
  int bias_ = -1;
  int64_t in_features_, out_features_;
};

}  // namespace tessera::nn
