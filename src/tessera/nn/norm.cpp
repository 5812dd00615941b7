#include "tessera/nn/norm.h"

#include "tessera/ops/elementwise.h"

namespace tessera::nn {

Norm::Norm(ParameterStore& store, const std::string& name, int64_t hidden, double eps, NormKind kind,
           bool sequence_parallel) {
  if (kind == NormKind::rmsnorm) rmsnorm_.emplace(store, name, hidden, eps, sequence_parallel);
  else layernorm_.emplace(store, name, hidden, eps, sequence_parallel);
}

Tensor Norm::forward(Arena& arena, const Tensor& in, Saved& saved) const {
  return rmsnorm_ ? rmsnorm_->forward(arena, in, saved.rmsnorm) : layernorm_->forward(arena, in, saved.layernorm);
}

Tensor Norm::backward(Arena& arena, const Tensor& dout, const Saved& saved, const Tensor& residual_grad) const {
  if (layernorm_) return layernorm_->backward(arena, dout, saved.layernorm, residual_grad);
  Tensor din = rmsnorm_->backward(arena, dout, saved.rmsnorm);
  if (residual_grad.defined()) ops::add_inplace(din, residual_grad);
  return din;
}

}  // namespace tessera::nn
