#include "tessera/data/mock_dataset.h"

#include <algorithm>

#include "tessera/core/error.h"
#include "tessera/core/rng.h"

namespace tessera::data {

MockDataset::MockDataset(int64_t seq_length, int64_t vocab_size, int64_t num_samples, uint64_t seed)
    : seq_length_(seq_length), vocab_size_(vocab_size), num_samples_(num_samples), seed_(seed) {
  if (seq_length <= 0) TESSERA_CONFIG_FAIL("model.seq_length = ", seq_length, ": must be positive for mock data");
  if (vocab_size < 8 || vocab_size > INT32_MAX)
    TESSERA_CONFIG_FAIL("data.vocab_size = ", vocab_size, ": mock_data needs a vocabulary of 8 to 2^31-1 ids");
  if (num_samples <= 0) TESSERA_CONFIG_FAIL("mock dataset needs a positive sample count, got ", num_samples);
}

void MockDataset::sample(int64_t index, std::span<int32_t> tokens, std::span<float> loss_mask) const {
  TESSERA_CHECK(static_cast<int64_t>(tokens.size()) == seq_length_ + 1 &&
                    static_cast<int64_t>(loss_mask.size()) == seq_length_,
                "MockDataset::sample needs ", seq_length_ + 1, " tokens and ", seq_length_, " mask values");
  TESSERA_CHECK(index >= 0, "sample index ", index, " is negative");
  const uint64_t i = static_cast<uint64_t>(index % num_samples_);
  const RandomStream stream(seed_, stream_id("mock_data"));
  const uint64_t v = static_cast<uint64_t>(vocab_size_);
  const uint64_t start = stream.below(2 * i, v);
  const uint64_t stride = static_cast<uint64_t>(kStrides[stream.below(2 * i + 1, 5)]) % v;
  uint64_t token = start;
  for (auto& t : tokens) {
    t = static_cast<int32_t>(token);
    token = (token + stride) % v;
  }
  std::fill(loss_mask.begin(), loss_mask.end(), 1.0f);
}

}  // namespace tessera::data
