// The transformer MLP: linear_fc1 (h -> ffn, column-parallel), tanh GeLU, linear_fc2 (ffn -> h,
// row-parallel): the ffn axis is split over tensor-parallel ranks, no communication in between.
#pragma once
#include <string>

#include "tessera/nn/parallel_linear.h"

namespace tessera::nn {

class MLP {
 public:
  struct Saved {
    Tensor in, fc1, activation;  // in: fc1's (all-gathered) input
  };
  MLP(ParameterStore& store, const std::string& name, int64_t hidden, int64_t ffn_hidden, double init_std,
      double output_init_std, const parallel::TensorParallel& tp = {});
  // discard (selective recomputation): the GeLU output goes there and is not kept (saved.activation
  // undefined); backward computes it again from saved.fc1.
  Tensor forward(Arena& arena, const Tensor& in, Saved& saved, Arena* discard = nullptr) const;
  Tensor backward(Arena& arena, const Tensor& dout, const Saved& saved) const;

 private:
  ColumnParallelLinear fc1_;
  RowParallelLinear fc2_;
};

}  // namespace tessera::nn
