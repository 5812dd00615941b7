#include "tessera/nn/linear.h"

#include "tessera/ops/linear.h"

namespace tessera::nn {

Linear::Linear(ParameterStore& store, const std::string& name, int64_t in_features, int64_t out_features, bool bias,
               double init_std, bool sequence_parallel)
    : store_(&store), in_features_(in_features), out_features_(out_features) {
  Sharding replicated;
  replicated.sequence_parallel = sequence_parallel;
  weight_ = store.add(name + ".weight", {out_features, in_features}, Init::normal, init_std, true, replicated);
  if (bias) bias_ = store.add(name + ".bias", {out_features}, Init::zeros, 0.0, false, replicated);
}

Tensor Linear::forward(Arena& arena, const Tensor& in) const {
  Tensor out = arena.allocate(in.dtype(), {in.dim(0), out_features_});
  ops::linear_forward(in, store_->value(weight_), bias_ >= 0 ? store_->value(bias_) : Tensor(), out);
  return out;
}

Tensor Linear::backward(Arena& arena, const Tensor& dout, const Tensor& in) const {
  Tensor din = arena.allocate(in.dtype(), {in.dim(0), in_features_});
  ops::linear_backward(dout, in, store_->value(weight_), din, store_->grad(weight_),
                       bias_ >= 0 ? store_->grad(bias_) : Tensor());
  return din;
}

}  // namespace tessera::nn
