// MockBertDataset: synthetic, learnable BERT samples with no files (data.mock_data with
// model.architecture = bert, as Megatron's MockBERTDataset). Ids: 0 [PAD], 1 [CLS], 2 [SEP],
// 3 [MASK], the rest regular. Sample i is a pure function of (seed, i): an arithmetic progression
// modulo kPeriod over ids 4.. of n ids (n = seq_length - 3 minus up to a quarter, so some samples
// are padded; random replacements draw from the whole vocabulary), split
// into A and B at a random point; with probability 1/2 the halves are swapped (is_random = 1);
// laid out as [CLS] A [SEP] B [SEP] [PAD]... and masked as BERT masks (bert_masking.h, every
// token a word). The order and the masked ids follow from the neighbours, so the loss falls.
#pragma once
#include "tessera/data/sample_source.h"

namespace tessera::data {

class MockBertDataset : public SampleSource {
 public:
  static constexpr int32_t kPad = 0, kCls = 1, kSep = 2, kMask = 3, kFirstRegular = 4;
  static constexpr int64_t kPeriod = 64;
  MockBertDataset(int64_t seq_length, int64_t vocab_size, int64_t num_samples, uint64_t seed, double mask_prob = 0.15);
  int64_t num_samples() const override { return num_samples_; }
  int64_t seq_length() const override { return seq_length_; }
  void sample(int64_t index, std::span<int32_t> tokens, std::span<float> loss_mask) const override;
  bool masked_lm() const override { return true; }
  void masked_lm_sample(int64_t index, MaskedLmSample& out) const override;

 private:
  int64_t seq_length_, vocab_size_, num_samples_;
  uint64_t seed_;
  double mask_prob_;
};

}  // namespace tessera::data
