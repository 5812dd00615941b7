// tessera-train with one more loss: "truncated_lm", the token mean of min(loss, loss.truncate_at),
// which stops a few hard tokens (noise, mislabelled data) from dominating the gradient. Registered
// before the config is read, so training.loss = "truncated_lm" and loss.truncate_at work in config
// files, --set and --help like the built-in keys.
#include <algorithm>
#include <cmath>
#include <vector>

#include "tessera/cli/train_command.h"
#include "tessera/core/error.h"
#include "tessera/models/loss_registry.h"
#include "tessera/ops/elementwise.h"

namespace {

using namespace tessera;

class TruncatedLmLoss : public models::TokenLoss {
 public:
  explicit TruncatedLmLoss(double truncate_at) : truncate_at_(truncate_at) {
    if (!(truncate_at > 0)) TESSERA_CONFIG_FAIL("loss.truncate_at = ", truncate_at, " must be > 0");
  }
  std::string name() const override { return "truncated_lm"; }
  double denominator(const models::LossInputs& in) const override {  // the loss tokens
    double count = 0;
    for (float m : in.loss_mask) count += m;
    return count;
  }
  models::LossTerms forward(Arena&, const models::LossInputs& in, const Tensor& mask, const Tensor& token_losses,
                            const Tensor& dlosses) const override {
    const int64_t n = in.seq * in.batch;
    std::vector<float> losses(static_cast<size_t>(n)), masks(static_cast<size_t>(n)), d(static_cast<size_t>(n));
    ops::copy(token_losses, Tensor(losses.data(), DType::f32, {n}));
    ops::copy(mask, Tensor(masks.data(), DType::f32, {n}));
    models::LossTerms terms;
    double truncated = 0;
    for (size_t i = 0; i < losses.size(); ++i) {
      const bool cut = losses[i] > truncate_at_;
      terms.loss_sum += masks[i] * std::min<double>(losses[i], truncate_at_);
      d[i] = cut ? 0.0f : masks[i];  // no gradient through a truncated token
      truncated += cut ? masks[i] : 0.0f;
    }
    ops::copy(Tensor(d.data(), DType::f32, {n}), dlosses);
    terms.metric_sums.emplace_back("truncated_fraction", truncated);
    return terms;
  }

 private:
  double truncate_at_;
};

}  // namespace

int main(int argc, char** argv) {
  tessera::models::register_loss(
      {"truncated_lm",
       "token mean of min(cross entropy, loss.truncate_at) (examples/custom_loss)",
       {{"truncate_at", 10.0, "per-token losses above this count as this, without gradient (truncated_lm)"}},
       [](const tessera::models::LossParams& p) {
         return std::make_shared<const TruncatedLmLoss>(p.number("truncate_at"));
       }});
  return tessera::cli::train_main(argc, argv);
}
