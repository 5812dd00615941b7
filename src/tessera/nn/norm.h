// The norm a transformer layer is built with (models' LayerSpec::norm): LayerNorm (weight, bias) or
// RMSNorm (weight only), behind one forward / backward, so blocks and models hold "a norm".
#pragma once
#include <optional>
#include <string>

#include "tessera/nn/layernorm.h"
#include "tessera/nn/rmsnorm.h"

namespace tessera::nn {

enum class NormKind { layernorm, rmsnorm };

class Norm {
 public:
  struct Saved {
    LayerNorm::Saved layernorm;
    RMSNorm::Saved rmsnorm;
  };
  Norm(ParameterStore& store, const std::string& name, int64_t hidden, double eps, NormKind kind,
       bool sequence_parallel = false);
  Tensor forward(Arena& arena, const Tensor& in, Saved& saved) const;
  // The input's gradient, plus residual_grad when defined (LayerNorm: in its backward's pass).
  Tensor backward(Arena& arena, const Tensor& dout, const Saved& saved, const Tensor& residual_grad = Tensor()) const;
  NormKind kind() const { return rmsnorm_ ? NormKind::rmsnorm : NormKind::layernorm; }
  const LayerNorm* layernorm() const { return layernorm_ ? &*layernorm_ : nullptr; }  // null for RMSNorm

 private:
  std::optional<LayerNorm> layernorm_;
  std::optional<RMSNorm> rmsnorm_;
};

}  // namespace tessera::nn
