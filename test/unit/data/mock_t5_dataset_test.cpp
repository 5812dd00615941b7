// MockT5Dataset (data.mock_data with model.architecture = t5): masking proportion within 1% of
// mask_prob over 10k samples, the realised span length Megatron's masking gives, sentinel layout
// and lengths, the text an arithmetic progression, determinism per seed.
#include <gtest/gtest.h>

#include <cmath>

#include "data/t5_test_util.h"
#include "tessera/core/error.h"
#include "tessera/data/mock_t5_dataset.h"

namespace tessera {
namespace {

using data::MockT5Dataset;

TEST(MockT5Dataset, MaskingProportionAndSpanLengthOver10kSamples) {
  MockT5Dataset d(512, 128, 32128, 10000, 1234);
  ASSERT_EQ(d.sentinels().size(), 100u);
  EXPECT_EQ(d.sentinels()[0], 32127);  // HF T5's order: <extra_id_0> is the last id
  double masked = 0, real = 0, spans = 0;
  for (int64_t i = 0; i < 10000; ++i) {
    const auto s = test::read_t5(d, i);
    const auto layout = test::check_t5_layout(s, d.sentinels(), MockT5Dataset::kPad, MockT5Dataset::kBos,
                                              MockT5Dataset::kEos);
    if (HasFailure()) FAIL() << "sample " << i;
    real += static_cast<double>(layout.text.size());
    for (const auto& span : layout.spans) masked += static_cast<double>(span.size());
    spans += static_cast<double>(layout.spans.size());
    ASSERT_LE(layout.text.size(), 510u);  // encoder_seq_length - 2
    ASSERT_GE(layout.text.size(), 510u - 127u);
  }
  const double proportion = masked / real, mean_span = masked / spans;
  EXPECT_NEAR(proportion, 0.15, 0.01 * 0.15) << "masked tokens / real tokens";
  // Every token is a word here, so spans are min(Geometric(0.2), 10) words shortened to the budget:
  // below the draw's mean 4.463, well above the T5 paper's 3.
  std::printf("mock T5: masked proportion %.5f, mean span %.4f tokens over %.0f spans\n", proportion, mean_span, spans);
  EXPECT_GT(mean_span, 3.9);
  EXPECT_LT(mean_span, 4.463);
}

TEST(MockT5Dataset, TextIsAProgressionAndSamplesAreDeterministicPerSeed) {
  MockT5Dataset a(64, 24, 200, 100, 5), b(64, 24, 200, 100, 5), c(64, 24, 200, 100, 6);
  int differ = 0;
  for (int64_t i = 0; i < 100; ++i) {
    const auto s = test::read_t5(a, i);
    EXPECT_EQ(s, test::read_t5(b, i)) << "same seed, same sample " << i;
    EXPECT_EQ(s, test::read_t5(a, i + 100)) << "indices wrap";
    differ += !(s == test::read_t5(c, i));
    const auto layout = test::check_t5_layout(s, a.sentinels(), 0, 1, 2);
    ASSERT_GE(layout.text.size(), 3u);
    for (int32_t id : layout.text) {
      EXPECT_GE(id, MockT5Dataset::kFirstRegular);
      EXPECT_LT(id, 200 - static_cast<int32_t>(a.sentinels().size()));
    }
    const int64_t regular = std::min<int64_t>(200 - 3 - static_cast<int64_t>(a.sentinels().size()), MockT5Dataset::kPeriod);
    const int64_t stride = ((layout.text[1] - layout.text[0]) % regular + regular) % regular;
    for (size_t j = 1; j < layout.text.size(); ++j)
      EXPECT_EQ(((layout.text[j] - layout.text[j - 1]) % regular + regular) % regular, stride) << i << " " << j;
    EXPECT_LE(layout.decoder_length, 24);
  }
  EXPECT_GT(differ, 90);
}

TEST(MockT5Dataset, RejectsTooSmallShapes) {
  EXPECT_THROW(MockT5Dataset(4, 24, 200, 10, 1), ConfigError);
  EXPECT_THROW(MockT5Dataset(64, 2, 200, 10, 1), ConfigError);
  EXPECT_THROW(MockT5Dataset(64, 24, 8, 10, 1), ConfigError);
  EXPECT_THROW(MockT5Dataset(64, 24, 200, 10, 1, 0), ConfigError);
}

}  // namespace
}  // namespace tessera
