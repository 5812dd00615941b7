// MockDataset: synthetic, learnable GPT samples with no files. Sample i is a pure function of
// (seed, i): the same on every rank and under every parallel layout.
#pragma once
#include <cstdint>

#include "tessera/data/sample_source.h"

namespace tessera::data {

// Sample i (seq_length + 1 ids) is an arithmetic progression modulo vocab_size:
//   token j = (start_i + j * stride_i) mod vocab_size,
// with start_i uniform in [0, vocab_size) and stride_i drawn from {1, 2, 3, 5, 7}, both from
// RandomStream(seed, stream_id("mock_data")) at counters 2i and 2i + 1. Only the first label
// needs the stride guessed (1 in 5); from the second on the next id is cur + (cur - prev), so a
// tiny GPT drives the loss from ln(vocab) towards ~0: a quick "does training learn" check.
class MockDataset : public SampleSource {
 public:
  MockDataset(int64_t seq_length, int64_t vocab_size, int64_t num_samples, uint64_t seed);
  int64_t num_samples() const override { return num_samples_; }
  int64_t seq_length() const override { return seq_length_; }
  void sample(int64_t index, std::span<int32_t> tokens, std::span<float> loss_mask) const override;

  static constexpr int64_t kStrides[5] = {1, 2, 3, 5, 7};

 private:
  int64_t seq_length_;
  int64_t vocab_size_;
  int64_t num_samples_;
  uint64_t seed_;
};

}  // namespace tessera::data
