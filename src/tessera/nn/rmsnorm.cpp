#include "tessera/nn/rmsnorm.h"

#include "tessera/ops/rmsnorm.h"

namespace tessera::nn {

RMSNorm::RMSNorm(ParameterStore& store, const std::string& name, int64_t hidden, double eps, bool sequence_parallel)
    : store_(&store), eps_(eps) {
  Sharding replicated;
  replicated.sequence_parallel = sequence_parallel;
  weight_ = store.add(name + ".weight", {hidden}, Init::ones, 0.0, false, replicated);
}

Tensor RMSNorm::forward(Arena& arena, const Tensor& in, Saved& saved) const {
  Tensor out = arena.allocate(in.dtype(), in.shape());
  saved.in = in;
  // rstd in fp32 on a GPU (the kernels' accumulation type); the CPU reference keeps the input dtype.
  saved.rstd = arena.allocate(in.device().is_cuda() ? DType::f32 : in.dtype(), {in.dim(0)});
  ops::rmsnorm_forward(in, store_->value(weight_), eps_, out, saved.rstd);
  return out;
}

Tensor RMSNorm::backward(Arena& arena, const Tensor& dout, const Saved& saved) const {
  Tensor din = arena.allocate(dout.dtype(), dout.shape());
  ops::rmsnorm_backward(dout, saved.in, store_->value(weight_), saved.rstd, din, store_->grad(weight_));
  return din;
}

}  // namespace tessera::nn
