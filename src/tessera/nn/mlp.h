// The transformer MLP: linear_fc1 (h -> ffn), tanh GeLU, linear_fc2 (ffn -> h).
#pragma once
#include <string>

#include "tessera/nn/linear.h"

namespace tessera::nn {

class MLP {
 public:
  struct Saved {
    Tensor in, fc1, activation;
  };
  MLP(ParameterStore& store, const std::string& name, int64_t hidden, int64_t ffn_hidden, double init_std,
      double output_init_std);
  Tensor forward(Arena& arena, const Tensor& in, Saved& saved) const;
  Tensor backward(Arena& arena, const Tensor& dout, const Saved& saved) const;

 private:
  Linear fc1_;
  Linear fc2_;
};

}  // namespace tessera::nn
