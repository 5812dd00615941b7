// A source of fixed-length training samples: sample i is seq_length + 1 token ids (inputs are the
// first seq_length, labels the last seq_length). Implemented by the mock dataset and GPTDataset.
#pragma once
#include <cstdint>
#include <span>

namespace tessera::data {

class SampleSource {
 public:
  virtual ~SampleSource() = default;
  virtual int64_t num_samples() const = 0;  // distinct samples before wrapping around
  virtual int64_t seq_length() const = 0;
  // Fills tokens (seq_length + 1 ids) with sample `index` (any index >= 0; wraps if needed) and
  // loss_mask (seq_length values, 1 = counts in the loss).
  virtual void sample(int64_t index, std::span<int32_t> tokens, std::span<float> loss_mask) const = 0;
};

}  // namespace tessera::data
