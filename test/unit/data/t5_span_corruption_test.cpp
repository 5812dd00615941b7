// T5 span corruption (Megatron's create_masked_lm_predictions, masking_style "t5"): the span-length
// draw is min(Geometric(0.2), 10) (mean (1 - 0.8^10) / 0.2 = 4.463 words, not the T5 paper's 3),
// the chosen spans are whole words, disjoint, within the budget round(n x mask_prob), and the
// sample layout (sentinels, [BOS] + target, target + [EOS], masks, padding) round-trips the text.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "data/t5_test_util.h"
#include "tessera/core/error.h"
#include "tessera/data/t5_span_corruption.h"

namespace tessera {
namespace {

using data::Draws;

TEST(T5SpanCorruption, SpanLengthsAreGeometricClippedAtTen) {
  Draws draws{RandomStream(7, 99), 0};
  const int64_t n = 200000;
  double sum = 0;
  std::vector<int64_t> counts(11, 0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = data::draw_span_words(draws, 0.2, 10);
    ASSERT_GE(k, 1);
    ASSERT_LE(k, 10);
    ++counts[static_cast<size_t>(k)];
    sum += static_cast<double>(k);
  }
  const double expected_mean = (1.0 - std::pow(0.8, 10)) / 0.2;  // 4.4631
  EXPECT_NEAR(sum / static_cast<double>(n), expected_mean, 0.01 * expected_mean);
  EXPECT_NEAR(static_cast<double>(counts[1]) / static_cast<double>(n), 0.2, 0.005);             // P(1) = p
  EXPECT_NEAR(static_cast<double>(counts[10]) / static_cast<double>(n), std::pow(0.8, 9), 0.005);  // P(>= 10)
}

TEST(T5SpanCorruption, SpansAreWholeWordsDisjointAndWithinTheBudget) {
  // Words of 1-3 tokens: candidate 1 starts a word, 2 continues it.
  std::vector<uint8_t> candidate;
  for (int w = 0; candidate.size() < 400; ++w)
    for (int t = 0; t < 1 + w % 3; ++t) candidate.push_back(t == 0 ? 1 : 2);
  data::SpanCorruptionOptions options;
  options.max_predictions = 60;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    Draws draws{RandomStream(seed, 1), 0};
    const auto spans = data::choose_t5_spans(candidate, options, draws);
    ASSERT_FALSE(spans.empty());
    size_t masked = 0, last_end = 0;
    for (const auto& s : spans) {
      EXPECT_GE(s.first, last_end) << "sorted and disjoint";
      EXPECT_EQ(candidate[s.first], 1) << "a span starts a word";
      EXPECT_TRUE(s.end == candidate.size() || candidate[s.end] == 1) << "a span ends a word";
      masked += s.end - s.first;
      last_end = s.end;
    }
    EXPECT_LE(masked, 60u);  // min(max_predictions, round(400 x 0.15) = 60)
    EXPECT_GE(masked, 50u);  // the budget is nearly filled (a word of up to 3 tokens may not fit)
  }
}

TEST(T5SpanCorruption, LayoutRoundTripsTheText) {
  std::vector<int32_t> text(40);
  std::iota(text.begin(), text.end(), 10);
  const std::vector<int32_t> sentinels = {99, 98, 97, 96, 95, 94, 93, 92, 91, 90};
  const std::vector<data::MaskedSpan> spans = {{0, 2}, {5, 6}, {6, 9}, {39, 40}};  // adjacent spans stay apart
  test::T5Sample s(48, 16);
  auto view = s.view();
  data::write_t5_sample(text, spans, data::T5SpecialIds{0, 1, 2, sentinels}, view);
  const auto layout = test::check_t5_layout(s, sentinels, 0, 1, 2);
  EXPECT_EQ(layout.text, text);
  ASSERT_EQ(layout.spans.size(), 4u);
  EXPECT_EQ(layout.spans[2], (std::vector<int32_t>{16, 17, 18}));
  EXPECT_EQ(layout.encoder_length, 40 - 7 + 4);
  EXPECT_EQ(layout.decoder_length, 1 + 7 + 4);  // [BOS], the masked tokens, one sentinel per span
  const std::vector<int32_t> encoder_head = {99, 12, 13, 14, 98, 97, 19};
  EXPECT_TRUE(std::equal(encoder_head.begin(), encoder_head.end(), s.tokens.begin()));
  const std::vector<int32_t> decoder = {1, 99, 10, 11, 98, 15, 97, 16, 17, 18, 96, 49};
  EXPECT_TRUE(std::equal(decoder.begin(), decoder.end(), s.decoder_tokens.begin()));
  EXPECT_EQ(s.labels[11], 2);  // [EOS]
}

TEST(T5SpanCorruption, TooFewSentinelsOrTooShortADecoderFail) {
  std::vector<int32_t> text(20, 5);
  const std::vector<int32_t> one = {99};
  test::T5Sample s(24, 16);
  auto view = s.view();
  EXPECT_THROW(data::write_t5_sample(text, {{0, 1}, {3, 4}}, data::T5SpecialIds{0, 1, 2, one}, view), Error);
  test::T5Sample tight(24, 4);
  auto tight_view = tight.view();
  EXPECT_THROW(data::write_t5_sample(text, {{0, 5}}, data::T5SpecialIds{0, 1, 2, one}, tight_view), Error);
  // choose_t5_spans honours both caps.
  std::vector<uint8_t> candidate(200, 1);
  data::SpanCorruptionOptions options;
  options.max_spans = 2;
  options.max_decoder_tokens = 12;
  for (uint64_t seed = 0; seed < 50; ++seed) {
    Draws draws{RandomStream(seed, 2), 0};
    const auto spans = data::choose_t5_spans(candidate, options, draws);
    size_t masked = 0;
    for (const auto& sp : spans) masked += sp.end - sp.first;
    EXPECT_LE(spans.size(), 2u);
    EXPECT_LE(1 + masked + spans.size(), 12u);  // [BOS], the sentinels, the masked tokens
  }
}

}  // namespace
}  // namespace tessera
