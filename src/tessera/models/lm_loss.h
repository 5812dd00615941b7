// The language-model loss (training.loss = "lm", the default): the cross entropy summed over the
// tokens the loss mask keeps, over their count (Megatron's lm loss).
#pragma once
#include "tessera/models/token_loss.h"

namespace tessera::models {

class LmLoss : public TokenLoss {
 public:
  std::string name() const override { return "lm"; }
  double denominator(const LossInputs& inputs) const override;  // the sum of the loss mask
  LossTerms forward(Arena& arena, const LossInputs& inputs, const Tensor& mask, const Tensor& token_losses,
                    const Tensor& dlosses) const override;
  bool gradient_before_losses(Arena& arena, const LossInputs& inputs, const Tensor& mask,
                              const Tensor& dlosses) const override;  // the mask
};

}  // namespace tessera::models
