#include "tessera/models/lm_loss.h"

#include "tessera/ops/elementwise.h"

namespace tessera::models {

double LmLoss::denominator(const LossInputs& inputs) const {
  double count = 0;
  for (float m : inputs.loss_mask) count += m;
  return count;
}

LossTerms LmLoss::forward(Arena&, const LossInputs&, const Tensor& mask, const Tensor& token_losses,
                          const Tensor& dlosses) const {
  ops::copy(mask, dlosses);  // d(sum of mask * loss) / d(loss) = mask
  return {ops::masked_sum_deferred(token_losses, mask), {}};
}

bool LmLoss::gradient_before_losses(Arena&, const LossInputs&, const Tensor& mask, const Tensor& dlosses) const {
  ops::copy(mask, dlosses);
  return true;
}

}  // namespace tessera::models
