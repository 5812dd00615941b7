#include "tessera/nn/mlp.h"

#include "tessera/ops/activation.h"
#include "tessera/ops/swiglu.h"

namespace tessera::nn {

MLP::MLP(ParameterStore& store, const std::string& name, int64_t hidden, int64_t ffn_hidden, double init_std,
         double output_init_std, const parallel::TensorParallel& tp, const MlpOptions& options)
    : swiglu_(options.swiglu),
      fc1_(store, name + ".linear_fc1", hidden, (options.swiglu ? 2 : 1) * ffn_hidden, options.bias, init_std, tp),
      fc2_(store, name + ".linear_fc2", ffn_hidden, hidden, options.bias, output_init_std, tp) {}

Tensor MLP::forward(Arena& arena, const Tensor& in, Saved& saved) const {
  saved.fc1 = fc1_.forward(arena, in, saved.in);
  if (swiglu_) {
    saved.activation = arena.allocate(in.dtype(), {saved.fc1.dim(0), saved.fc1.dim(1) / 2});
    ops::swiglu_forward(saved.fc1, saved.activation);
  } else {
    saved.activation = arena.allocate(in.dtype(), saved.fc1.shape());
    ops::gelu_forward(saved.fc1, saved.activation);
  }
  return fc2_.forward(arena, saved.activation);
}

Tensor MLP::backward(Arena& arena, const Tensor& dout, const Saved& saved) const {
  Tensor dactivation = fc2_.backward(arena, dout, saved.activation);
  Tensor dfc1 = arena.allocate(dout.dtype(), saved.fc1.shape());
  if (swiglu_) ops::swiglu_backward(dactivation, saved.fc1, dfc1);
  else ops::gelu_backward(dactivation, saved.fc1, dfc1);
  return fc1_.backward(arena, dfc1, saved.in);
}

}  // namespace tessera::nn
