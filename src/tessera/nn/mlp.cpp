#include "tessera/nn/mlp.h"

#include "tessera/ops/activation.h"

namespace tessera::nn {

MLP::MLP(ParameterStore& store, const std::string& name, int64_t hidden, int64_t ffn_hidden, double init_std,
         double output_init_std, const parallel::TensorParallel& tp)
    : fc1_(store, name + ".linear_fc1", hidden, ffn_hidden, true, init_std, tp),
      fc2_(store, name + ".linear_fc2", ffn_hidden, hidden, true, output_init_std, tp) {}

Tensor MLP::forward(Arena& arena, const Tensor& in, Saved& saved, Arena* discard) const {
  saved.fc1 = fc1_.forward(arena, in, saved.in);
  Tensor activation = (discard ? *discard : arena).allocate(in.dtype(), saved.fc1.shape());
  ops::gelu_forward(saved.fc1, activation);
  saved.activation = discard ? Tensor() : activation;
  return fc2_.forward(arena, activation);
}

Tensor MLP::backward(Arena& arena, const Tensor& dout, const Saved& saved) const {
  Tensor activation = saved.activation;
  if (!activation.data()) {  // dropped by selective recomputation
    activation = arena.allocate(saved.fc1.dtype(), saved.fc1.shape());
    ops::gelu_forward(saved.fc1, activation);
  }
  Tensor dactivation = fc2_.backward(arena, dout, activation);
  Tensor dfc1 = arena.allocate(dout.dtype(), saved.fc1.shape());
  ops::gelu_backward(dactivation, saved.fc1, dfc1);
  return fc1_.backward(arena, dfc1, saved.in);
}

}  // namespace tessera::nn
