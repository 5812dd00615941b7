#include "tessera/nn/mlp.h"

#include "tessera/ops/activation.h"
#include "tessera/ops/swiglu.h"

namespace tessera::nn {

MLP::MLP(ParameterStore& store, const std::string& name, int64_t hidden, int64_t ffn_hidden, double init_std,
         double output_init_std, const parallel::TensorParallel& tp, const MlpOptions& options)
    : swiglu_(options.swiglu),
      gelu_erf_(options.gelu_erf),
      fc1_(store, name + ".linear_fc1", hidden, (options.swiglu ? 2 : 1) * ffn_hidden, options.bias, init_std, tp),
      fc2_(store, name + ".linear_fc2", ffn_hidden, hidden, options.bias, output_init_std, tp) {}

Tensor MLP::forward(Arena& arena, const Tensor& in, Saved& saved, const ForwardScratch& scratch,
                    const Tensor& residual) const {
  Tensor activation;
  if (tanh_gelu()) {  // one GEMM writes the pre-activation and the GeLU where the backend can
    saved.fc1 = fc1_.forward_gelu(arena, scratch.for_recomputable(arena), in, saved.in, activation);
  } else {
    saved.fc1 = fc1_.forward(arena, in, saved.in);
    activation = activation_buffer(scratch.for_recomputable(arena), saved.fc1);
    activate(saved.fc1, activation);
  }
  saved.activation = scratch.drop_recomputable ? Tensor() : activation;
  if (residual.defined()) return fc2_.forward(arena, activation, residual);
  return fc2_.forward(scratch.for_transient(arena), activation);
}

Tensor MLP::activation_buffer(Arena& arena, const Tensor& fc1) const {
  return arena.allocate(fc1.dtype(), {fc1.dim(0), fc1.dim(1) / (swiglu_ ? 2 : 1)});  // SwiGLU halves it
}

void MLP::activate(const Tensor& fc1, const Tensor& activation) const {
  if (swiglu_) ops::swiglu_forward(fc1, activation);
  else if (gelu_erf_) ops::activation_forward(ops::Activation::gelu_erf, fc1, activation);
  else ops::gelu_forward(fc1, activation);
}

Tensor MLP::backward(Arena& arena, const Tensor& dout, const Saved& saved) const {
  Tensor activation = saved.activation;
  if (!activation.data()) {  // dropped by selective recomputation
    activation = activation_buffer(arena, saved.fc1);
    activate(saved.fc1, activation);
  }
  if (tanh_gelu()) return fc1_.backward(arena, fc2_.backward_dgelu(arena, dout, activation, saved.fc1), saved.in);
  Tensor dactivation = fc2_.backward(arena, dout, activation);
  Tensor dfc1 = arena.allocate(dout.dtype(), saved.fc1.shape());
  if (swiglu_) ops::swiglu_backward(dactivation, saved.fc1, dfc1);
  else if (gelu_erf_) ops::activation_backward(ops::Activation::gelu_erf, dactivation, saved.fc1, dfc1);
  else ops::gelu_backward(dactivation, saved.fc1, dfc1);
  return fc1_.backward(arena, dfc1, saved.in);
}

}  // namespace tessera::nn
