#include "tessera/nn/layernorm.h"

#include "tessera/ops/layernorm.h"

namespace tessera::nn {

LayerNorm::LayerNorm(ParameterStore& store, const std::string& name, int64_t hidden, double eps,
                     bool sequence_parallel)
    : store_(&store), eps_(eps) {
  Sharding replicated;
  replicated.sequence_parallel = sequence_parallel;
  weight_ = store.add(name + ".weight", {hidden}, Init::ones, 0.0, false, replicated);
  bias_ = store.add(name + ".bias", {hidden}, Init::zeros, 0.0, false, replicated);
}

Tensor LayerNorm::forward(Arena& arena, const Tensor& in, Saved& saved) const {
  Tensor out = arena.allocate(in.dtype(), in.shape());
  saved.in = in;
  // Statistics in fp32 on a GPU (the kernels' accumulation type); the CPU reference keeps the input dtype.
  const DType stats = in.device().is_cuda() ? DType::f32 : in.dtype();
  saved.mean = arena.allocate(stats, {in.dim(0)});
  saved.rstd = arena.allocate(stats, {in.dim(0)});
  ops::layernorm_forward(in, store_->value(weight_), store_->value(bias_), eps_, out, saved.mean, saved.rstd);
  return out;
}

Tensor LayerNorm::weight() const { return store_->value(weight_); }
Tensor LayerNorm::bias() const { return store_->value(bias_); }

Tensor LayerNorm::backward(Arena& arena, const Tensor& dout, const Saved& saved, const Tensor& residual_grad) const {
  Tensor din = arena.allocate(dout.dtype(), dout.shape());
  ops::layernorm_backward(dout, saved.in, store_->value(weight_), saved.mean, saved.rstd, din, store_->grad(weight_),
                          store_->grad(bias_), residual_grad);
  return din;
}

}  // namespace tessera::nn
