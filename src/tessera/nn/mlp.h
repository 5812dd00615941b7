// The transformer MLP: linear_fc1 (h -> ffn, column-parallel), tanh GeLU, linear_fc2 (ffn -> h,
// row-parallel): the ffn axis is split over tensor-parallel ranks, no communication in between.
// SwiGLU (MlpOptions::swiglu): linear_fc1 is the fused gate/up projection h -> 2 ffn whose rows hold
// each unit's gate and up side by side (row 2j = gate_j, 2j + 1 = up_j; ops/swiglu.h), so a
// tensor-parallel rank's contiguous rows are whole (gate, up) pairs of its ffn / tp units.
#pragma once
#include <string>

#include "tessera/nn/forward_scratch.h"
#include "tessera/nn/parallel_linear.h"

namespace tessera::nn {

struct MlpOptions {
  bool swiglu = false;
  bool bias = true;  // linear_fc1 / linear_fc2 biases (model.add_bias_linear)
  bool gelu_erf = false;  // the exact (erf) GeLU instead of the tanh approximation (BERT)
};

class MLP {
 public:
  struct Saved {
    Tensor in, fc1, activation;  // in: fc1's (all-gathered) input
  };
  MLP(ParameterStore& store, const std::string& name, int64_t hidden, int64_t ffn_hidden, double init_std,
      double output_init_std, const parallel::TensorParallel& tp = {}, const MlpOptions& options = {});
  // scratch (nn/forward_scratch.h): fc2's output (dead after the caller's residual add) goes to its
  // transient arena; with drop_recomputable the activation output (GeLU or SwiGLU) too, not kept
  // (saved.activation undefined): backward computes it again from saved.fc1.
  // residual (in's shape, or undefined): added to fc2's output in its GEMM (RowParallelLinear::forward);
  // the result then lives in `arena`, not in scratch's transient arena.
  Tensor forward(Arena& arena, const Tensor& in, Saved& saved, const ForwardScratch& scratch = {},
                 const Tensor& residual = Tensor()) const;
  Tensor backward(Arena& arena, const Tensor& dout, const Saved& saved) const;
  // For a fused decode step (nn::TransformerLayer): the linears and the activation.
  const ColumnParallelLinear& fc1() const { return fc1_; }
  const RowParallelLinear& fc2() const { return fc2_; }
  bool swiglu() const { return swiglu_; }
  bool gelu_erf() const { return gelu_erf_; }
  bool tanh_gelu() const { return !swiglu_ && !gelu_erf_; }  // fc1 and the GeLU fuse (linear_gelu_forward)

 private:
  void activate(const Tensor& fc1, const Tensor& activation) const;  // GeLU or SwiGLU of fc1's output
  Tensor activation_buffer(Arena& arena, const Tensor& fc1) const;    // [rows, ffn] for fc1's output
  bool swiglu_, gelu_erf_;
  ColumnParallelLinear fc1_;
  RowParallelLinear fc2_;
};

}  // namespace tessera::nn
