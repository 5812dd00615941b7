// Megatron's sampling filters against hand-computed distributions (softmax of log([.1 .2 .3 .4]) is
// [.1 .2 .3 .4]).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tessera/core/error.h"
#include "tessera/generate/sampling.h"

namespace tessera::generate {
namespace {

std::vector<float> base_logits() { return {std::log(0.1f), std::log(0.2f), std::log(0.3f), std::log(0.4f)}; }

void expect_probs(const std::vector<float>& logits, const std::vector<double>& expected) {
  const auto p = softmax(logits);
  ASSERT_EQ(p.size(), expected.size());
  for (size_t i = 0; i < p.size(); ++i) EXPECT_NEAR(p[i], expected[i], 1e-6) << "token " << i;
}

TEST(GenerateSampling, TopKKeepsTheKLargest) {
  auto l = base_logits();
  top_k_filter(l, 2);
  expect_probs(l, {0, 0, 3.0 / 7, 4.0 / 7});
  EXPECT_EQ(l[0], -std::numeric_limits<float>::infinity());
}

TEST(GenerateSampling, TopPKeepsTheSmallestSetReachingP) {
  // sorted .4 .3 .2 .1, cumulative .4 .7 .9 1; a token goes when the tokens before it exceed p
  auto l = base_logits();
  top_p_filter(l, 0.5);
  expect_probs(l, {0, 0, 3.0 / 7, 4.0 / 7});
  l = base_logits();
  top_p_filter(l, 0.3);  // the most likely token always stays
  expect_probs(l, {0, 0, 0, 1});
  l = base_logits();
  top_p_filter(l, 0.75);
  expect_probs(l, {0, 2.0 / 9, 3.0 / 9, 4.0 / 9});
}

TEST(GenerateSampling, TemperatureFlattens) {
  auto l = base_logits();
  apply_temperature(l, 2.0);  // p^(1/2), renormalised
  const double s = std::sqrt(.1) + std::sqrt(.2) + std::sqrt(.3) + std::sqrt(.4);
  expect_probs(l, {std::sqrt(.1) / s, std::sqrt(.2) / s, std::sqrt(.3) / s, std::sqrt(.4) / s});
}

TEST(GenerateSampling, TopPDecayStopsAtTheBound) {
  EXPECT_DOUBLE_EQ(next_top_p(0.9, 0.5, 0.3), 0.45);
  EXPECT_DOUBLE_EQ(next_top_p(0.45, 0.5, 0.3), 0.3);
  EXPECT_DOUBLE_EQ(next_top_p(0.9, 0.5, 0.0), 0.45);
  EXPECT_DOUBLE_EQ(next_top_p(0.9, 0.0, 0.3), 0.9);  // no decay
  EXPECT_DOUBLE_EQ(next_top_p(0.0, 0.5, 0.3), 0.0);  // no top-p
}

TEST(GenerateSampling, ChooseDrawsByInverseCdfOfTheFilteredDistribution) {
  SamplingParams p;
  p.top_k = 2;
  auto l = base_logits();
  EXPECT_EQ(choose_token(l, p, 0.0, 0.42), 2);  // cumulative 3/7 = .4286
  l = base_logits();
  EXPECT_EQ(choose_token(l, p, 0.0, 0.43), 3);
  p.top_k = 0;  // top-p 0.75: [0, 2/9, 3/9, 4/9]
  l = base_logits();
  EXPECT_EQ(choose_token(l, p, 0.75, 0.0), 1);
  l = base_logits();
  EXPECT_EQ(choose_token(l, p, 0.75, 0.2), 1);
  l = base_logits();
  EXPECT_EQ(choose_token(l, p, 0.75, 0.23), 2);
  l = base_logits();
  EXPECT_EQ(choose_token(l, p, 0.75, 0.99), 3);
  p.top_k = 1;  // greedy ignores the draw
  l = base_logits();
  EXPECT_EQ(choose_token(l, p, 0.0, 0.0), 3);
}

TEST(GenerateSampling, GreedyTakesTheFirstOfTies) {
  std::vector<float> l = {1, 3, 3, 2};
  EXPECT_EQ(argmax(l), 1);
}

TEST(GenerateSampling, LogSoftmax) {
  const auto l = base_logits();
  EXPECT_NEAR(log_softmax_at(l, 2), std::log(0.3), 1e-6);
}

TEST(GenerateSampling, ValidationRefusesMegatronsForbiddenCombinations) {
  SamplingParams p;
  p.top_k = 5;
  p.top_p = 0.9;
  EXPECT_THROW(validate(p, "test"), ConfigError);
  p = SamplingParams{};
  p.top_k = 0;
  p.top_p = 1.5;
  EXPECT_THROW(validate(p, "test"), ConfigError);
  p.top_p = 0.5;
  p.temperature = 0;
  EXPECT_THROW(validate(p, "test"), ConfigError);
  p.temperature = 1;
  p.top_p_bound = 0.6;
  EXPECT_THROW(validate(p, "test"), ConfigError);
  p.top_p_bound = 0.2;
  p.top_p_decay = 0.9;
  EXPECT_NO_THROW(validate(p, "test"));
}

}  // namespace
}  // namespace tessera::generate
