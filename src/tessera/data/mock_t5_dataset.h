// MockT5Dataset: synthetic, learnable T5 samples with no files (data.mock_data with
// model.architecture = t5, as Megatron's MockT5Dataset). Ids: 0 [PAD], 1 [BOS], 2 [EOS], then the
// regular ids, and the sentinels at the top of the vocabulary (<extra_id_k> = vocab_size - 1 - k,
// HF T5's order; sentinel_count() of them: data.vocab_extra_ids, at most half of the vocabulary so
// the regular ids keep the rest). Sample i is a pure function of (seed, i): an arithmetic
// progression modulo kPeriod over the regular ids, n = encoder length - 2 minus up to a quarter
// (so some samples are padded), every token a word, span-corrupted as Megatron's T5 dataset
// (t5_span_corruption.h). The masked ids follow from their neighbours, so the loss falls.
#pragma once
#include <vector>

#include "tessera/data/sample_source.h"

namespace tessera::data {

class MockT5Dataset : public SampleSource {
 public:
  static constexpr int32_t kPad = 0, kBos = 1, kEos = 2, kFirstRegular = 3;
  static constexpr int64_t kPeriod = 64;
  MockT5Dataset(int64_t seq_length, int64_t decoder_seq_length, int64_t vocab_size, int64_t num_samples,
                uint64_t seed, int64_t vocab_extra_ids = 100, double mask_prob = 0.15);
  int64_t num_samples() const override { return num_samples_; }
  int64_t seq_length() const override { return seq_length_; }
  void sample(int64_t index, std::span<int32_t> tokens, std::span<float> loss_mask) const override;
  bool seq2seq() const override { return true; }
  int64_t decoder_seq_length() const override { return decoder_seq_length_; }
  void seq2seq_sample(int64_t index, Seq2SeqSample& out) const override;
  const std::vector<int32_t>& sentinels() const { return sentinels_; }

 private:
  int64_t seq_length_, decoder_seq_length_, vocab_size_, num_samples_;
  uint64_t seed_;
  double mask_prob_;
  std::vector<int32_t> sentinels_;
};

}  // namespace tessera::data
