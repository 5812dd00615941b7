#include "tessera/nn/t5_mlp.h"

#include <cmath>

#include "tessera/ops/activation.h"
#include "tessera/ops/dropout.h"
#include "tessera/ops/swiglu.h"

namespace tessera::nn {

T5Mlp::T5Mlp(ParameterStore& store, const std::string& name, int64_t hidden, int64_t ffn_hidden, bool gated,
             double dropout, double init_factor, const parallel::TensorParallel& tp)
    : name_(name),
      gated_(gated),
      dropout_(dropout),
      tp_(tp),
      fc1_(store, name + ".linear_fc1", hidden, gated ? 2 * ffn_hidden : ffn_hidden, false,
           init_factor / std::sqrt(static_cast<double>(hidden)), tp),
      fc2_(store, name + ".linear_fc2", ffn_hidden, hidden, false,
           init_factor / std::sqrt(static_cast<double>(ffn_hidden)), tp) {}

Tensor T5Mlp::forward(Arena& arena, const Tensor& in, const DropoutContext& dropout, Saved& saved) const {
  saved.fc1 = fc1_.forward(arena, in, saved.in);
  const int64_t units = gated_ ? saved.fc1.dim(1) / 2 : saved.fc1.dim(1);
  saved.activation = arena.allocate(saved.fc1.dtype(), {saved.fc1.dim(0), units});
  if (gated_) ops::geglu_forward(saved.fc1, saved.activation);
  else ops::activation_forward(ops::Activation::relu, saved.fc1, saved.activation);
  Tensor dropped = saved.activation;
  const double p = dropout.training ? dropout_ : 0.0;
  if (p > 0) {
    dropped = arena.allocate(saved.activation.dtype(), saved.activation.shape());
    ops::dropout_forward(saved.activation, p, dropout.stream(name_ + ".dropout.tp" + std::to_string(tp_.rank)), 0,
                         dropped);
  }
  saved.activation = dropped;  // fc2's input (backward needs only it and fc1)
  return fc2_.forward(arena, dropped);
}

Tensor T5Mlp::backward(Arena& arena, const Tensor& dout, const DropoutContext& dropout, const Saved& saved) const {
  Tensor dact = fc2_.backward(arena, dout, saved.activation);
  const double p = dropout.training ? dropout_ : 0.0;
  if (p > 0) {
    Tensor d = arena.allocate(dact.dtype(), dact.shape());
    ops::dropout_backward(dact, p, dropout.stream(name_ + ".dropout.tp" + std::to_string(tp_.rank)), 0, d);
    dact = d;
  }
  Tensor dfc1 = arena.allocate(saved.fc1.dtype(), saved.fc1.shape());
  if (gated_) ops::geglu_backward(dact, saved.fc1, dfc1);
  else ops::activation_backward(ops::Activation::relu, dact, saved.fc1, dfc1);
  return fc1_.backward(arena, dfc1, saved.in);
}

}  // namespace tessera::nn
