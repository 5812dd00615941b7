#include "tessera/models/keytoken_loss.h"

#include <cmath>

#include "tessera/core/error.h"
#include "tessera/ops/elementwise.h"

namespace tessera::models {

KeytokenWeightedLoss::KeytokenWeightedLoss(std::vector<int64_t> keytoken_ids, double alpha)
    : keytokens_(keytoken_ids.begin(), keytoken_ids.end()), alpha_(alpha) {
  if (keytoken_ids.empty())
    TESSERA_CONFIG_FAIL("loss.keytoken_ids is empty; training.loss = \"keytoken_weighted\" needs the ids of the key ",
                        "tokens, e.g. loss.keytoken_ids = [198, 628]");
  for (int64_t id : keytoken_ids)
    if (id < 0) TESSERA_CONFIG_FAIL("loss.keytoken_ids holds ", id, "; token ids are >= 0");
  if (!std::isfinite(alpha) || alpha < 0)
    TESSERA_CONFIG_FAIL("loss.alpha = ", alpha, " must be a finite number >= 0");
}

double KeytokenWeightedLoss::denominator(const LossInputs& inputs) const { return static_cast<double>(inputs.batch); }

double KeytokenWeightedLoss::sample_weight(const LossInputs& inputs, int64_t b) const {
  int64_t count = 0;
  for (int64_t s = 0; s < inputs.seq; ++s) count += keytokens_.count(inputs.input(b, s));
  return 1.0 + alpha_ * static_cast<double>(count);
}

std::vector<float> KeytokenWeightedLoss::token_gradients(const LossInputs& in) const {
  std::vector<float> gradients(static_cast<size_t>(in.seq * in.batch));
  for (int64_t b = 0; b < in.batch; ++b) {
    double mask_sum = 0;
    for (int64_t s = 0; s < in.seq; ++s) mask_sum += in.mask(b, s);
    if (mask_sum == 0) continue;
    const double weight = sample_weight(in, b);
    for (int64_t s = 0; s < in.seq; ++s)  // d(weight * loss_sum / mask_sum) / d(token loss)
      gradients[static_cast<size_t>(s * in.batch + b)] = static_cast<float>(weight * in.mask(b, s) / mask_sum);
  }
  return gradients;
}

bool KeytokenWeightedLoss::gradient_before_losses(Arena&, const LossInputs& in, const Tensor&,
                                                  const Tensor& dlosses) const {
  std::vector<float> gradients = token_gradients(in);
  ops::copy(Tensor(gradients.data(), DType::f32, {static_cast<int64_t>(gradients.size())}, Device::cpu()), dlosses);
  return true;
}

LossTerms KeytokenWeightedLoss::forward(Arena& arena, const LossInputs& in, const Tensor& mask,
                                        const Tensor& token_losses, const Tensor& dlosses) const {
  const size_t n = static_cast<size_t>(in.seq * in.batch);
  std::vector<float> losses(n);
  ops::copy(token_losses, Tensor(losses.data(), DType::f32, {static_cast<int64_t>(n)}, Device::cpu()));
  LossTerms terms;
  double unweighted = 0;
  for (int64_t b = 0; b < in.batch; ++b) {
    double mask_sum = 0, loss_sum = 0;
    for (int64_t s = 0; s < in.seq; ++s) {
      mask_sum += in.mask(b, s);
      loss_sum += static_cast<double>(in.mask(b, s)) * losses[static_cast<size_t>(s * in.batch + b)];
    }
    if (mask_sum == 0) continue;
    terms.loss_sum += sample_weight(in, b) * loss_sum / mask_sum;
    unweighted += loss_sum / mask_sum;
  }
  gradient_before_losses(arena, in, mask, dlosses);
  terms.metric_sums.emplace_back("unweighted_loss", unweighted);
  return terms;
}

LossRegistration keytoken_weighted_registration() {
  return {"keytoken_weighted",
          "each sample's mean token loss x (1 + alpha x its key tokens), averaged over samples (the Accelerate "
          "guide's GPTTrainStepWithCustomLoss)",
          {{"keytoken_ids", std::vector<int64_t>{}, "ids of the key tokens (keytoken_weighted)"},
           {"alpha", 1.0, "weight per key token (keytoken_weighted)"}},
          [](const LossParams& p) {
            return std::make_shared<const KeytokenWeightedLoss>(p.integers("keytoken_ids"), p.number("alpha"));
          }};
}

}  // namespace tessera::models
