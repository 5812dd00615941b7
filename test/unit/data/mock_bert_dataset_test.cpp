// BERT masking and the BERT mock dataset: [CLS] A [SEP] B [SEP] layout with token types and
// padding, sentence-order swaps about half the time, 15% of the tokens masked with 80/10/10
// [MASK] / random / kept (within 1% over 10k samples), labels only at masked positions, and
// samples a pure function of (seed, index).
#include <gtest/gtest.h>

#include <cmath>

#include "tessera/data/bert_masking.h"
#include "tessera/data/mock_bert_dataset.h"

namespace tessera {
namespace {

using data::MockBertDataset;

struct Sample {
  std::vector<int32_t> tokens, labels, types;
  std::vector<float> mask;
  std::vector<uint8_t> padding;
  int32_t is_random = 0;
  explicit Sample(size_t s) : tokens(s), labels(s), types(s), mask(s), padding(s) {}
};

Sample read(const MockBertDataset& d, int64_t index) {
  Sample out(static_cast<size_t>(d.seq_length()));
  data::MaskedLmSample view{out.tokens, out.labels, out.types, out.mask, out.padding, 0};
  d.masked_lm_sample(index, view);
  out.is_random = view.is_random;
  return out;
}

TEST(MockBertDataset, LayoutTypesAndPadding) {
  const int64_t seq = 32;
  MockBertDataset d(seq, 64, 1000, 5);
  int padded = 0;
  for (int64_t i = 0; i < 200; ++i) {
    const Sample s = read(d, i);
    EXPECT_EQ(s.tokens[0], MockBertDataset::kCls);
    EXPECT_EQ(s.labels[0], MockBertDataset::kCls);
    int64_t real = 0;
    while (real < seq && s.padding[static_cast<size_t>(real)]) ++real;
    for (int64_t j = real; j < seq; ++j) {
      EXPECT_EQ(s.padding[static_cast<size_t>(j)], 0);
      EXPECT_EQ(s.tokens[static_cast<size_t>(j)], MockBertDataset::kPad);
      EXPECT_EQ(s.mask[static_cast<size_t>(j)], 0.0f);
    }
    padded += real < seq;
    EXPECT_GE(real, 3 * (seq - 3) / 4 + 3 - 1);
    // [SEP] closes A (types 0) and B (types 1); both halves are non-empty.
    int sep = 0;
    int64_t first_sep = -1;
    for (int64_t j = 0; j < real; ++j)
      if (s.labels[static_cast<size_t>(j)] == MockBertDataset::kSep) {
        ++sep;
        if (first_sep < 0) first_sep = j;
      }
    EXPECT_EQ(sep, 2);
    EXPECT_EQ(s.labels[static_cast<size_t>(real - 1)], MockBertDataset::kSep);
    EXPECT_GT(first_sep, 1);
    EXPECT_LT(first_sep, real - 2);
    for (int64_t j = 0; j < real; ++j) EXPECT_EQ(s.types[static_cast<size_t>(j)], j > first_sep ? 1 : 0);
    // Special tokens are never masked; labels differ from the input only where masked.
    for (int64_t j = 0; j < seq; ++j) {
      const size_t u = static_cast<size_t>(j);
      if (s.labels[u] < MockBertDataset::kFirstRegular) EXPECT_EQ(s.mask[u], 0.0f);
      if (s.mask[u] == 0.0f) EXPECT_EQ(s.labels[u], s.tokens[u]);
    }
  }
  EXPECT_GT(padded, 50);
}

TEST(MockBertDataset, MaskingProportionsAndSentenceOrderOver10kSamples) {
  const int64_t seq = 64;
  MockBertDataset d(seq, 1000, 20000, 11);
  int64_t real = 0, masked = 0, to_mask = 0, random = 0, kept = 0, swapped = 0;
  const int64_t samples = 10000;
  for (int64_t i = 0; i < samples; ++i) {
    const Sample s = read(d, i);
    swapped += s.is_random;
    for (size_t j = 0; j < s.tokens.size(); ++j) {
      if (!s.padding[j]) continue;
      ++real;
      if (s.mask[j] == 0.0f) continue;
      ++masked;
      if (s.tokens[j] == MockBertDataset::kMask) ++to_mask;
      else if (s.tokens[j] == s.labels[j]) ++kept;
      else ++random;
    }
  }
  const double p = static_cast<double>(masked) / static_cast<double>(real);
  std::printf("masked %.4f of tokens; [MASK] %.4f random %.4f kept %.4f; swapped %.4f\n", p,
              double(to_mask) / masked, double(random) / masked, double(kept) / masked, double(swapped) / samples);
  // n_mask = round(0.15 x the sample's tokens, [CLS] and [SEP] included), as Megatron.
  EXPECT_NEAR(p, 0.15, 0.01);
  EXPECT_NEAR(double(to_mask) / masked, 0.8, 0.01);
  // A random replacement may draw the original id (1 in 1000): kept ~ 0.1 + 0.1/1000.
  EXPECT_NEAR(double(random) / masked, 0.1, 0.01);
  EXPECT_NEAR(double(kept) / masked, 0.1, 0.01);
  EXPECT_NEAR(double(swapped) / samples, 0.5, 0.02);
}

TEST(MockBertDataset, DeterministicPerSeed) {
  MockBertDataset a(32, 64, 100, 7), b(32, 64, 100, 7), c(32, 64, 100, 8);
  for (int64_t i : {0, 5, 99, 150}) {
    const Sample x = read(a, i), y = read(b, i), z = read(c, i);
    EXPECT_EQ(x.tokens, y.tokens);
    EXPECT_EQ(x.labels, y.labels);
    EXPECT_EQ(x.mask, y.mask);
    EXPECT_EQ(x.is_random, y.is_random);
    EXPECT_NE(x.labels, z.labels);
  }
  EXPECT_EQ(read(a, 3).tokens, read(a, 103).tokens);  // wraps after num_samples
}

TEST(BertMasking, WholeWordsAreMaskedTogether) {
  // candidate 1 = word start, 2 = "##" continuation: words are {1,2,3}, {4}, {5,6}.
  std::vector<int32_t> tokens = {101, 10, 11, 12, 20, 30, 31, 102};
  const std::vector<uint8_t> candidate = {0, 1, 2, 2, 1, 1, 2, 0};
  int whole = 0;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    std::vector<int32_t> t = tokens, labels = tokens;
    std::vector<float> mask(t.size(), 0.0f);
    data::MaskingOptions options;
    options.mask_prob = 0.3;
    options.mask_id = 103;
    options.vocab_size = 200;
    data::Draws draws{RandomStream(seed, 1), 0};
    const int64_t n = data::mask_tokens(t, candidate, options, draws, labels, mask);
    EXPECT_GE(n, 1);
    EXPECT_LE(n, 2);  // round(8 x 0.3) = 2
    EXPECT_EQ(mask[0], 0.0f);
    EXPECT_EQ(mask[7], 0.0f);
    // A word is masked as a whole: its tokens share the mask value.
    EXPECT_EQ(mask[1], mask[2]);
    EXPECT_EQ(mask[2], mask[3]);
    EXPECT_EQ(mask[5], mask[6]);
    whole += mask[5] != 0.0f;
  }
  EXPECT_GT(whole, 0);
}

}  // namespace
}  // namespace tessera
