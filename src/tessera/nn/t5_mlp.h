// T5's feed-forward block (HF T5DenseActDense / T5DenseGatedActDense): no biases;
//   relu (T5 v1.0):       linear_fc1 (h -> ffn), ReLU, dropout, linear_fc2 (ffn -> h);
//   gated-gelu (v1.1):    linear_fc1 (h -> 2 ffn, HF's wi_0 and wi_1 rows interleaved per unit as
//                         SwiGLU's, ops/swiglu.h), gelu_new(wi_0 x) * (wi_1 x), dropout, linear_fc2.
// linear_fc1 is column-parallel, linear_fc2 row-parallel (the ffn axis is split over TP). The
// dropout between them (HF's DenseReluDense.dropout) draws from a stream keyed by the TP rank.
#pragma once
#include <string>

#include "tessera/nn/dropout_context.h"
#include "tessera/nn/parallel_linear.h"

namespace tessera::nn {

class T5Mlp {
 public:
  struct Saved {
    Tensor in, fc1, activation;  // activation: fc2's input (after the dropout)
  };
  // HF's T5 initialisation scaled by init_factor: wi ~ N(0, f hidden^-1/2), wo ~ N(0, f ffn^-1/2).
  T5Mlp(ParameterStore& store, const std::string& name, int64_t hidden, int64_t ffn_hidden, bool gated, double dropout,
        double init_factor, const parallel::TensorParallel& tp = {});
  Tensor forward(Arena& arena, const Tensor& in, const DropoutContext& dropout, Saved& saved) const;
  Tensor backward(Arena& arena, const Tensor& dout, const DropoutContext& dropout, const Saved& saved) const;

 private:
  std::string name_;
  bool gated_;
  double dropout_;
  parallel::TensorParallel tp_;
  ColumnParallelLinear fc1_;
  RowParallelLinear fc2_;
};

}  // namespace tessera::nn
