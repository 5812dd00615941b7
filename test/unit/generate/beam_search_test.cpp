// Beam search bookkeeping on hand-made distributions: expansion from the first beam only, a stop
// token finishing a hypothesis with its length penalty, early stopping once num_beams are done.
#include <gtest/gtest.h>

#include <cmath>

#include "tessera/generate/beam_search.h"

namespace tessera::generate {
namespace {

std::vector<float> rows(const std::vector<std::vector<double>>& probs) {
  std::vector<float> out;
  for (const auto& r : probs)
    for (double p : r) out.push_back(static_cast<float>(std::log(p)));
  return out;
}

TEST(GenerateBeamSearch, FirstStepExpandsOnlyTheFirstBeam) {
  BeamSearch search(2, 1.0, -1);
  // Both beams hold the same prompt; beam 1's row would win if it were expanded.
  auto step = search.step(rows({{0.5, 0.3, 0.2}, {0.05, 0.05, 0.9}}), 3, false);
  EXPECT_EQ(step.source, (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(step.token, (std::vector<int32_t>{0, 1}));
  EXPECT_FALSE(search.done());
}

TEST(GenerateBeamSearch, StopTokenFinishesWithLengthPenaltyAndEarlyStopping) {
  const int stop = 2;
  BeamSearch search(2, 2.0, stop);
  // Step 1 from beam 0: tokens 0 (.5), 2 = stop (.3), 1 (.2): the stop candidate is among the best two,
  // so it finishes (score log .3 / 1^2); beams continue with 0 and 1.
  auto s1 = search.step(rows({{0.5, 0.2, 0.3}, {0.3, 0.3, 0.4}}), 3, false);
  EXPECT_EQ(s1.token, (std::vector<int32_t>{0, 1}));
  EXPECT_FALSE(search.done());
  // Step 2: beam 0 (log .5) ends with stop at .9: score (log .5 + log .9) / 2^2 beats log .3.
  auto s2 = search.step(rows({{0.05, 0.05, 0.9}, {0.1, 0.1, 0.8}}), 3, false);
  EXPECT_TRUE(search.done());  // two finished hypotheses = num_beams
  const auto& best = search.best();
  EXPECT_EQ(best.tokens, (std::vector<int32_t>{0, stop}));
  EXPECT_NEAR(best.score, (std::log(0.5) + std::log(0.9)) / 4.0, 1e-6);
  EXPECT_NEAR(best.logprobs[1], std::log(0.9), 1e-6);
}

TEST(GenerateBeamSearch, LastStepFinishesTheRunningBeams) {
  BeamSearch search(2, 1.0, -1);
  search.step(rows({{0.6, 0.4, 0.0001}, {0.3, 0.3, 0.4}}), 3, false);
  search.step(rows({{0.1, 0.1, 0.8}, {0.9, 0.05, 0.05}}), 3, true);
  ASSERT_TRUE(search.done());
  // beam 0 (.6) -> .8 = .48; beam 1 (.4) -> .9 = .36
  EXPECT_EQ(search.best().tokens, (std::vector<int32_t>{0, 2}));
  EXPECT_NEAR(search.best().score, std::log(0.48) / 2.0, 1e-6);
}

}  // namespace
}  // namespace tessera::generate
