// Blending (Megatron's greedy index: proportions, determinism, oversampling), data_path parsing,
// the data-parallel sampler, and the learnable mock dataset.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "data_test_util.h"
#include "tessera/core/error.h"
#include "tessera/data/blended_dataset.h"
#include "tessera/data/blended_dataset_builder.h"
#include "tessera/data/gpt_dataset_sampler.h"
#include "tessera/data/indexed_dataset_builder.h"
#include "tessera/data/mock_dataset.h"

using namespace tessera;
using namespace tessera::data;

TEST(Blending, RealisedProportionsWithinOnePercentOver10kSamples) {
  const std::vector<double> weights = normalize_weights({0.17, 0.33, 0.5, 0.0001});
  std::vector<int16_t> dataset_index;
  std::vector<int64_t> sample_index;
  build_blending_indices(weights, 10000, dataset_index, sample_index);
  std::vector<int64_t> count(weights.size(), 0);
  for (size_t i = 0; i < dataset_index.size(); ++i) {
    const auto d = static_cast<size_t>(dataset_index[i]);
    EXPECT_EQ(sample_index[i], count[d]) << "each dataset's samples are taken in order";
    ++count[d];
  }
  for (size_t d = 0; d < weights.size(); ++d)
    EXPECT_NEAR(static_cast<double>(count[d]) / 10000.0, weights[d], 0.01) << "dataset " << d;
  // Greedy error minimisation keeps every prefix close too.
  std::vector<int64_t> running(weights.size(), 0);
  for (size_t i = 0; i < 2000; ++i) {
    ++running[static_cast<size_t>(dataset_index[i])];
    for (size_t d = 0; d < weights.size(); ++d)
      EXPECT_LE(std::abs(static_cast<double>(running[d]) - weights[d] * static_cast<double>(i + 1)), 2.0);
  }
}

TEST(Blending, FirstSamplesFollowMegatronsRule) {
  // w = (0.3, 0.7): i=0: errors (0.3, 0.7) -> 1; i=1: (0.3, -0.3) -> 0; i=2: (0.6-1, 1.4-1) -> 1 ...
  std::vector<int16_t> index;
  std::vector<int64_t> sample;
  build_blending_indices({0.3, 0.7}, 6, index, sample);
  EXPECT_EQ(index, (std::vector<int16_t>{1, 0, 1, 1, 0, 1}));
  EXPECT_EQ(sample, (std::vector<int64_t>{0, 0, 1, 2, 1, 3}));
}

TEST(BlendedDataset, RoutesSamplesAndRefusesOversampling) {
  auto a = std::make_shared<MockDataset>(8, 100, 1000, 1);
  auto b = std::make_shared<MockDataset>(8, 100, 1000, 2);
  BlendedDataset blend({a, b}, {1.0, 3.0}, 400);
  EXPECT_EQ(blend.num_samples(), 400);
  std::vector<int32_t> got(9), want(9);
  std::vector<float> mask(8);
  for (int64_t i = 0; i < 50; ++i) {
    blend.sample(i, got, mask);
    const auto& src = blend.dataset_index()[static_cast<size_t>(i)] == 0 ? a : b;
    src->sample(blend.dataset_sample_index()[static_cast<size_t>(i)], want, mask);
    EXPECT_EQ(got, want);
  }
  auto small = std::make_shared<MockDataset>(8, 100, 10, 3);
  EXPECT_THROW(BlendedDataset({small, b}, {0.5, 0.5}, 100), ConfigError);
  auto other_length = std::make_shared<MockDataset>(16, 100, 1000, 3);
  EXPECT_THROW(BlendedDataset({a, other_length}, {0.5, 0.5}, 10), ConfigError);
}

TEST(DataPath, ParsesPrefixesAndWeightedPairs) {
  auto plain = parse_data_path({"a", "b"});
  EXPECT_EQ(plain.prefixes, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(plain.weights.empty());
  auto weighted = parse_data_path({"0.3", "a", "0.9", "b"});
  EXPECT_EQ(weighted.prefixes, (std::vector<std::string>{"a", "b"}));
  ASSERT_EQ(weighted.weights.size(), 2u);
  EXPECT_DOUBLE_EQ(weighted.weights[0], 0.25);
  EXPECT_THROW(parse_data_path({"0.3", "a", "b", "c"}), ConfigError);
  EXPECT_THROW(parse_data_path({}), ConfigError);
  EXPECT_EQ(requested_sample_counts(1000, 32, 100, 10), (std::array<int64_t, 3>{32000, 11 * 10 * 32, 320}));
}

TEST(BlendedDatasetBuilder, WeightedBlendOfTwoCorporaHitsTheWeights) {
  tessera::test::TempDir dir;
  for (int c = 0; c < 2; ++c) {
    IndexedDatasetBuilder builder(dir / ("c" + std::to_string(c)) + ".bin", IndexDType::uint16);
    for (int d = 0; d < 200; ++d) {
      std::vector<int32_t> tokens(static_cast<size_t>(20 + d % 13), c == 0 ? 1 : 2);
      builder.add_item(tokens);
      builder.end_document();
    }
    builder.finalize(dir / ("c" + std::to_string(c)) + ".idx");
  }
  GPTDatasetConfig config;
  config.seq_length = 16;
  config.split = "90,10,0";
  auto splits = build_gpt_datasets(parse_data_path({"0.25", dir / "c0", "0.75", dir / "c1"}), config, {10000, 200, 0});
  ASSERT_TRUE(splits.train && splits.valid);
  EXPECT_FALSE(splits.test);
  EXPECT_EQ(splits.train->num_samples(), 2500 + 7500);
  std::vector<int32_t> tokens(17);
  std::vector<float> mask(16);
  int64_t from_c1 = 0;
  for (int64_t i = 0; i < 10000; ++i) {
    splits.train->sample(i, tokens, mask);
    from_c1 += tokens[0] == 2;
  }
  EXPECT_NEAR(static_cast<double>(from_c1) / 10000.0, 0.75, 0.01);
}

TEST(DataParallelSampler, ContiguousPerRankWithinTheGlobalBatch) {
  DataParallelSampler sampler{2, 4, 16};  // micro-batch 2, DP 4, global batch 16 -> 2 micro-batches
  EXPECT_EQ(sampler.num_micro_batches(), 2);
  EXPECT_EQ(sampler.iteration_indices(0, 0, 0), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(sampler.iteration_indices(0, 0, 3), (std::vector<int64_t>{6, 7}));
  EXPECT_EQ(sampler.iteration_indices(0, 1, 1), (std::vector<int64_t>{10, 11}));
  EXPECT_EQ(sampler.iteration_indices(5, 1, 2), (std::vector<int64_t>{80 + 8 + 4, 80 + 8 + 5}));
  // Every sample of an iteration is read by exactly one (rank, micro-batch).
  std::set<int64_t> seen;
  for (int64_t m = 0; m < 2; ++m)
    for (int64_t r = 0; r < 4; ++r)
      for (int64_t i : sampler.iteration_indices(3, m, r)) EXPECT_TRUE(seen.insert(i).second);
  EXPECT_EQ(*seen.begin(), 48);
  EXPECT_EQ(*seen.rbegin(), 63);
  DataParallelSampler bad{3, 2, 16};
  EXPECT_THROW(bad.num_micro_batches(), ConfigError);
}

TEST(MockDataset, DeterministicLearnableProgressions) {
  MockDataset mock(32, 1000, 5000, 1234);
  std::vector<int32_t> a(33), b(33);
  std::vector<float> mask(32);
  std::set<std::pair<int32_t, int32_t>> starts;
  std::set<int32_t> strides;
  for (int64_t i = 0; i < 200; ++i) {
    mock.sample(i, a, mask);
    MockDataset(32, 1000, 5000, 1234).sample(i, b, mask);  // a pure function of (seed, i)
    EXPECT_EQ(a, b);
    const int32_t stride = ((a[1] - a[0]) % 1000 + 1000) % 1000;
    strides.insert(stride);
    for (size_t j = 1; j < a.size(); ++j) {
      ASSERT_GE(a[j], 0);
      ASSERT_LT(a[j], 1000);
      EXPECT_EQ(a[j], (a[j - 1] + stride) % 1000);
    }
    starts.insert({a[0], stride});
    EXPECT_TRUE(std::all_of(mask.begin(), mask.end(), [](float m) { return m == 1.0f; }));
  }
  EXPECT_EQ(strides, (std::set<int32_t>{1, 2, 3, 5, 7}));
  EXPECT_GT(starts.size(), 150u);
  MockDataset other(32, 1000, 5000, 99);
  other.sample(0, b, mask);
  mock.sample(0, a, mask);
  EXPECT_NE(a, b);
  EXPECT_THROW(MockDataset(0, 1000, 10, 1), ConfigError);
}
