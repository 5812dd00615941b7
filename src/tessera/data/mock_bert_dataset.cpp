#include "tessera/data/mock_bert_dataset.h"

#include <algorithm>
#include <cmath>

#include "tessera/core/error.h"
#include "tessera/data/bert_masking.h"

namespace tessera::data {

MockBertDataset::MockBertDataset(int64_t seq_length, int64_t vocab_size, int64_t num_samples, uint64_t seed,
                                 double mask_prob)
    : seq_length_(seq_length), vocab_size_(vocab_size), num_samples_(num_samples), seed_(seed), mask_prob_(mask_prob) {
  if (seq_length < 8) TESSERA_CONFIG_FAIL("model.seq_length = ", seq_length, ": BERT mock data needs at least 8");
  if (vocab_size < 16 || vocab_size > INT32_MAX)
    TESSERA_CONFIG_FAIL("data.vocab_size = ", vocab_size, ": BERT mock data needs a vocabulary of 16 to 2^31-1 ids");
  if (num_samples <= 0) TESSERA_CONFIG_FAIL("mock dataset needs a positive sample count, got ", num_samples);
}

void MockBertDataset::sample(int64_t, std::span<int32_t>, std::span<float>) const {
  TESSERA_FAIL("MockBertDataset holds masked-LM samples: read them with masked_lm_sample");
}

void MockBertDataset::masked_lm_sample(int64_t index, MaskedLmSample& out) const {
  const size_t s = static_cast<size_t>(seq_length_);
  TESSERA_CHECK(out.tokens.size() == s && out.labels.size() == s && out.token_types.size() == s &&
                    out.loss_mask.size() == s && out.padding_mask.size() == s,
                "MockBertDataset: every span of a sample needs ", s, " entries");
  TESSERA_CHECK(index >= 0, "sample index ", index, " is negative");
  const uint64_t i = static_cast<uint64_t>(index % num_samples_);
  Draws draws{RandomStream(seed_, stream_id("mock_bert_data") ^ (i * 0x9E3779B97F4A7C15ull)), 0};
  const int64_t max_real = seq_length_ - 3;  // [CLS] + 2 x [SEP]
  const int64_t n = max_real - static_cast<int64_t>(draws.below(static_cast<uint64_t>(max_real / 4 + 1)));
  // The progression runs over the first kPeriod regular ids (fewer with a small vocabulary).
  const uint64_t regular = static_cast<uint64_t>(std::min<int64_t>(vocab_size_ - kFirstRegular, kPeriod));
  const uint64_t start = draws.below(regular), stride = 1 + draws.below(3);
  const int64_t a_len = 1 + static_cast<int64_t>(draws.below(static_cast<uint64_t>(n - 1)));
  out.is_random = static_cast<int32_t>(draws.below(2));
  std::vector<int32_t> progression(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j)
    progression[static_cast<size_t>(j)] =
        kFirstRegular + static_cast<int32_t>((start + static_cast<uint64_t>(j) * stride) % regular);
  std::span<const int32_t> a(progression.data(), static_cast<size_t>(a_len));
  std::span<const int32_t> b(progression.data() + a_len, static_cast<size_t>(n - a_len));
  if (out.is_random) std::swap(a, b);
  std::fill(out.tokens.begin(), out.tokens.end(), kPad);
  std::fill(out.token_types.begin(), out.token_types.end(), 0);
  std::fill(out.loss_mask.begin(), out.loss_mask.end(), 0.0f);
  std::fill(out.padding_mask.begin(), out.padding_mask.end(), uint8_t{0});
  std::vector<uint8_t> candidate(s, 0);
  size_t at = 0;
  out.tokens[at++] = kCls;
  for (int32_t t : a) candidate[at] = 1, out.tokens[at++] = t;
  out.tokens[at++] = kSep;
  for (int32_t t : b) candidate[at] = 1, out.token_types[at] = 1, out.tokens[at++] = t;
  out.token_types[at] = 1;
  out.tokens[at++] = kSep;
  std::fill(out.padding_mask.begin(), out.padding_mask.begin() + static_cast<std::ptrdiff_t>(at), uint8_t{1});
  std::copy(out.tokens.begin(), out.tokens.end(), out.labels.begin());
  MaskingOptions options;
  options.mask_prob = mask_prob_;
  options.mask_id = kMask;
  options.vocab_size = vocab_size_;
  options.max_predictions = std::max<int64_t>(1, std::llround(mask_prob_ * static_cast<double>(seq_length_)));
  mask_tokens(out.tokens.subspan(0, at), std::span<const uint8_t>(candidate.data(), at), options, draws, out.labels,
              out.loss_mask);
}

}  // namespace tessera::data
