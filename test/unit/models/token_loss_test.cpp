// The training losses (token_loss.h): the lm and key-token weighted losses against hand-computed
// values on a fixed batch, their d(loss_sum)/d(token loss) against finite differences, and the
// registry's errors (unknown loss, a parameter of another loss, bad parameter values).
#include <gtest/gtest.h>

#include <cmath>

#include "tessera/core/error.h"
#include "tessera/models/keytoken_loss.h"
#include "tessera/models/lm_loss.h"
#include "tessera/train/config.h"

namespace tessera {
namespace {

// Two samples of three tokens, sample-major tokens [b, s+1] and mask [b, s].
struct Batch {
  std::vector<int32_t> tokens = {5, 9, 5, 1,   // sample 0: inputs 5 9 5 (two key tokens 5)
                                 2, 3, 4, 6};  // sample 1: inputs 2 3 4 (none)
  std::vector<float> mask = {1, 1, 0,   //
                             1, 1, 1};
  // Per-token losses, sequence-major (row s * batch + b).
  std::vector<float> losses = {0.5f, 2.0f,   // s = 0: sample 0, sample 1
                               1.5f, 1.0f,   // s = 1
                               9.0f, 3.0f};  // s = 2 (sample 0's is masked)
  models::LossInputs inputs() const { return {2, 3, tokens, mask}; }
  Tensor mask_rows() {  // the mask in the per-token layout
    rows = {mask[0], mask[3], mask[1], mask[4], mask[2], mask[5]};
    return Tensor(rows.data(), DType::f32, {6});
  }
  std::vector<float> rows;
};

double run(const models::TokenLoss& loss, Batch& batch, std::vector<float>* dlosses = nullptr) {
  std::vector<float> d(6, -1.0f);
  Arena arena(size_t(1) << 20);
  Tensor mask = batch.mask_rows();
  double sum = loss.forward(arena, batch.inputs(), mask, Tensor(batch.losses.data(), DType::f32, {6}),
                            Tensor(d.data(), DType::f32, {6}))
                   .loss_sum.value();
  if (dlosses) *dlosses = d;
  return sum;
}

TEST(TokenLoss, LmIsTheMaskedTokenSumOverTheMaskedCount) {
  Batch batch;
  models::LmLoss loss;
  EXPECT_EQ(loss.denominator(batch.inputs()), 5.0);
  std::vector<float> d;
  EXPECT_NEAR(run(loss, batch, &d), 0.5 + 2.0 + 1.5 + 1.0 + 3.0, 1e-12);
  EXPECT_EQ(d, (std::vector<float>{1, 1, 1, 1, 0, 1}));
}

TEST(TokenLoss, KeytokenWeightedMatchesTheGuideFormula) {
  Batch batch;
  models::KeytokenWeightedLoss loss({5, 42}, 0.25);
  EXPECT_EQ(loss.denominator(batch.inputs()), 2.0);  // samples
  EXPECT_EQ(loss.sample_weight(batch.inputs(), 0), 1.5);  // 1 + 0.25 x 2 key tokens
  EXPECT_EQ(loss.sample_weight(batch.inputs(), 1), 1.0);
  // sample 0: mean(0.5, 1.5) = 1.0, x 1.5; sample 1: mean(2, 1, 3) = 2.0, x 1.
  EXPECT_NEAR(run(loss, batch), 1.0 * 1.5 + 2.0 * 1.0, 1e-6);
}

TEST(TokenLoss, KeytokenGradientMatchesFiniteDifferences) {
  Batch batch;
  models::KeytokenWeightedLoss loss({5}, 0.7);
  std::vector<float> d;
  run(loss, batch, &d);
  for (size_t i = 0; i < 6; ++i) {
    const float h = 1e-2f, saved = batch.losses[i];
    batch.losses[i] = saved + h;
    const double up = run(loss, batch);
    batch.losses[i] = saved - h;
    const double down = run(loss, batch);
    batch.losses[i] = saved;
    EXPECT_NEAR(d[i], (up - down) / (2 * h), 1e-4) << "token row " << i;
  }
}

TEST(TokenLoss, GradientBeforeLossesIsForwardsGradient) {
  // Both built-in losses' gradients depend on the inputs and mask only: GPTModel's chunked output
  // layer uses gradient_before_losses before any token loss exists, then forward().
  Batch batch;
  const models::LmLoss lm;
  const models::KeytokenWeightedLoss keytoken({5}, 0.7);
  for (const models::TokenLoss* loss : {static_cast<const models::TokenLoss*>(&lm),
                                        static_cast<const models::TokenLoss*>(&keytoken)}) {
    std::vector<float> from_forward, early(6, -1.0f);
    run(*loss, batch, &from_forward);
    Arena arena(size_t(1) << 20);
    ASSERT_TRUE(loss->gradient_before_losses(arena, batch.inputs(), batch.mask_rows(), Tensor(early.data(), DType::f32, {6})))
        << loss->name();
    EXPECT_EQ(early, from_forward) << loss->name();
    EXPECT_NE(early, std::vector<float>(6, -1.0f)) << loss->name();
  }
}

TEST(TokenLoss, ConfigSelectsTheLossAndItsParameters) {
  train::Config c = train::load_config("", {"data.mock_data=true", "data.vocab_size=64", "training.loss=keytoken_weighted",
                                            "loss.keytoken_ids=[198, 628]", "loss.alpha=2.5"});
  EXPECT_EQ(c.training.loss, "keytoken_weighted");
  EXPECT_EQ(c.training.loss_params.integers("keytoken_ids"), (std::vector<int64_t>{198, 628}));
  EXPECT_EQ(c.training.loss_params.number("alpha"), 2.5);
}

void expect_config_error(std::vector<std::string> overrides, const std::string& fragment) {
  overrides.insert(overrides.begin(), {"data.mock_data=true", "data.vocab_size=64"});
  try {
    train::load_config("", overrides);
    ADD_FAILURE() << "no error for " << overrides.back();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(TokenLoss, BadLossConfigsNameTheKey) {
  expect_config_error({"training.loss=focal"}, "training.loss = \"focal\" is not a registered loss; registered: lm, keytoken_weighted");
  expect_config_error({"loss.alpha=3"}, "loss.alpha is a parameter of training.loss = \"keytoken_weighted\"");
  expect_config_error({"training.loss=keytoken_weighted"}, "loss.keytoken_ids is empty");
  expect_config_error({"training.loss=keytoken_weighted", "loss.keytoken_ids=[1]", "loss.alpha=-1"},
                      "loss.alpha = -1 must be a finite number >= 0");
  expect_config_error({"training.loss=keytoken_weighted", "loss.keytoken_ids=[1, \"a\"]"},
                      "loss.keytoken_ids entries must be integers");
}

}  // namespace
}  // namespace tessera
