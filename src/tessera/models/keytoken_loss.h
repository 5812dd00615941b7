// The key-token weighted loss of the Accelerate guide's GPTTrainStepWithCustomLoss
// (training.loss = "keytoken_weighted"): each sample's loss is its masked token mean, weighted by
// 1 + alpha x (how many of the sample's input tokens are key tokens); the step's loss is the mean
// of the weighted sample losses. Parameters: loss.keytoken_ids, loss.alpha. A sample whose loss
// mask is all zero adds 0 (the guide's formula would divide by zero) and still counts as a sample.
// Metric: unweighted_loss, the mean of the unweighted sample losses.
#pragma once
#include <unordered_set>
#include <vector>

#include "tessera/models/loss_registry.h"
#include "tessera/models/token_loss.h"

namespace tessera::models {

class KeytokenWeightedLoss : public TokenLoss {
 public:
  KeytokenWeightedLoss(std::vector<int64_t> keytoken_ids, double alpha);
  std::string name() const override { return "keytoken_weighted"; }
  double denominator(const LossInputs& inputs) const override;  // the samples
  LossTerms forward(Arena& arena, const LossInputs& inputs, const Tensor& mask, const Tensor& token_losses,
                    const Tensor& dlosses) const override;
  bool gradient_before_losses(Arena& arena, const LossInputs& inputs, const Tensor& mask,
                              const Tensor& dlosses) const override;  // weight x mask / the sample's mask sum
  // 1 + alpha x the key tokens among sample b's inputs.
  double sample_weight(const LossInputs& inputs, int64_t b) const;

 private:
  // d(loss_sum) / d(token loss), sequence-major: weight x mask / mask sum (0 in an all-masked sample).
  std::vector<float> token_gradients(const LossInputs& inputs) const;
  std::unordered_set<int64_t> keytokens_;
  double alpha_;
};

LossRegistration keytoken_weighted_registration();

}  // namespace tessera::models
