// Tensor-parallel linear layers (Megatron's ColumnParallelLinear and RowParallelLinear), weight
// [out, in] as nn::Linear. Column: output features split over TP ranks (weight [out/tp, in], bias
// [out/tp]); its input enters through f (copy to TP region) or, under sequence parallelism, is
// all-gathered from s/tp tokens. Row: input features split (weight [out, in/tp]); the partial
// outputs are all-reduced (or reduce-scattered to s/tp tokens under SP) and the replicated bias
// [out] is added after the reduction. With TP = 1 both are exactly nn::Linear.
#pragma once
#include <string>

#include "tessera/core/buffer.h"
#include "tessera/nn/parameter_store.h"
#include "tessera/tensor_parallel/tp_group.h"

namespace tessera::nn {

class ColumnParallelLinear {
 public:
  ColumnParallelLinear(ParameterStore& store, const std::string& name, int64_t in_features, int64_t out_features,
                       bool bias, double init_std, const parallel::TensorParallel& tp);
  // in: [n, in] ([n/tp, in] under SP) -> [n, out/tp]; total_input receives the (gathered) input
  // that backward needs.
  Tensor forward(Arena& arena, const Tensor& in, Tensor& total_input) const;
  // forward followed by the tanh GeLU, fused where the backend can (ops::linear_gelu_forward):
  // returns the pre-activation (in `arena`) and sets `activation` = gelu of it (in `activation_arena`).
  Tensor forward_gelu(Arena& arena, Arena& activation_arena, const Tensor& in, Tensor& total_input,
                      Tensor& activation) const;
  // -> d(in), the shape of forward's `in`.
  Tensor backward(Arena& arena, const Tensor& dout, const Tensor& total_input) const;
  int64_t local_out_features() const { return local_out_; }
  Tensor weight() const;  // this rank's [out/tp, in]
  Tensor bias() const;    // [out/tp], undefined without a bias

 private:
  ParameterStore* store_;
  parallel::TensorParallel tp_;
  int weight_ = -1, bias_ = -1;
  int64_t in_features_, local_out_;
};

class RowParallelLinear {
 public:
  RowParallelLinear(ParameterStore& store, const std::string& name, int64_t in_features, int64_t out_features,
                    bool bias, double init_std, const parallel::TensorParallel& tp);
  // in: [n, in/tp] -> [n, out] ([n/tp, out] under SP). residual (that shape, or undefined): added to the
  // output (without TP in the GEMM, one rounding: ops::linear_residual_forward; with TP after the reduction).
  Tensor forward(Arena& arena, const Tensor& in, const Tensor& residual = Tensor()) const;
  // dout: forward's output shape; -> d(in) [n, in/tp].
  Tensor backward(Arena& arena, const Tensor& dout, const Tensor& in) const;
  // backward for an input in = gelu(pre_activation): -> d(pre_activation) [n, in/tp], the GeLU's
  // derivative applied by the data-gradient GEMM where the backend can (ops::linear_backward_dgelu).
  Tensor backward_dgelu(Arena& arena, const Tensor& dout, const Tensor& in, const Tensor& pre_activation) const;
  Tensor weight() const;  // this rank's [out, in/tp]
  Tensor bias() const;    // [out] (added after the reduction), undefined without a bias

 private:
  Tensor backward_impl(Arena& arena, const Tensor& dout, const Tensor& in, const Tensor* pre_activation) const;

  ParameterStore* store_;
  parallel::TensorParallel tp_;
  int weight_ = -1, bias_ = -1;
  int64_t local_in_, out_features_;
};

}  // namespace tessera::nn
