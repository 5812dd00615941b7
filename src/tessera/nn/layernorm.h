// LayerNorm layer over the hidden axis (weight initialised to 1, bias to 0, no weight decay).
// Replicated over tensor-parallel ranks; under sequence parallelism it sees s/tp tokens, so its
// params are flagged sequence_parallel (grads all-reduced over TP).
#pragma once
#include <string>

#include "tessera/core/buffer.h"
#include "tessera/nn/parameter_store.h"

namespace tessera::nn {

class LayerNorm {
 public:
  struct Saved {
    Tensor in, mean, rstd;
  };
  LayerNorm(ParameterStore& store, const std::string& name, int64_t hidden, double eps,
            bool sequence_parallel = false);
  Tensor forward(Arena& arena, const Tensor& in, Saved& saved) const;  // [n, h] -> [n, h]
  // The input's gradient; plus residual_grad (when defined) in the same pass: a pre-norm block's residual.
  Tensor backward(Arena& arena, const Tensor& dout, const Saved& saved, const Tensor& residual_grad = Tensor()) const;
  // The parameters (a fused decode kernel applies the norm itself: ops/decode_linear.h).
  Tensor weight() const;
  Tensor bias() const;
  double eps() const { return eps_; }

 private:
  ParameterStore* store_;
  int weight_, bias_;
  double eps_;
};

}  // namespace tessera::nn
