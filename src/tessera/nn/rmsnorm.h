// RMSNorm layer over the hidden axis (Llama, Megatron's normalization = RMSNorm): weight only,
// initialised to 1, no weight decay. Replicated over tensor-parallel ranks; under sequence
// parallelism it sees s/tp tokens, so its weight is flagged sequence_parallel (grads all-reduced).
#pragma once
#include <string>

#include "tessera/core/buffer.h"
#include "tessera/nn/parameter_store.h"

namespace tessera::nn {

class RMSNorm {
 public:
  struct Saved {
    Tensor in, rstd;
  };
  RMSNorm(ParameterStore& store, const std::string& name, int64_t hidden, double eps, bool sequence_parallel = false);
  Tensor forward(Arena& arena, const Tensor& in, Saved& saved) const;  // [n, h] -> [n, h]
  Tensor backward(Arena& arena, const Tensor& dout, const Saved& saved) const;

 private:
  ParameterStore* store_;
  int weight_;
  double eps_;
};

}  // namespace tessera::nn
