// The three index arrays of Megatron's GPTDataset (document, sample and shuffle index), built as
// megatron/core/datasets/gpt_dataset.py + helpers.cpp build them, with numpy-identical shuffles.
#pragma once
#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace tessera::data {

// numpy.random.RandomState(seed) restricted to what GPTDataset uses: the legacy MT19937 seeded
// with init_genrand (identical to std::mt19937(seed)), bounded draws by masked rejection
// (numpy's random_interval: 32-bit draws when max fits 32 bits, else 64-bit = hi << 32 | lo) and
// shuffle = Fisher-Yates from the end (for i = n-1 .. 1: j = interval(i); swap a[i], a[j]).
// Same seed, same calls: bit-identical permutations to numpy, hence to Megatron.
class NumpyRandomState {
 public:
  explicit NumpyRandomState(uint32_t seed) : mt_(seed) {}
  uint32_t next_uint32() { return static_cast<uint32_t>(mt_()); }
  uint64_t next_uint64() {
    uint64_t hi = next_uint32();
    return hi << 32 | next_uint32();
  }
  double random_sample() {  // numpy's random_sample(): 53-bit double from two draws
    int32_t a = static_cast<int32_t>(next_uint32() >> 5), b = static_cast<int32_t>(next_uint32() >> 6);
    return (a * 67108864.0 + b) / 9007199254740992.0;
  }
  uint64_t interval(uint64_t max);  // uniform in [0, max]
  template <typename T>
  void shuffle(std::span<T> values) {
    for (size_t i = values.size(); i-- > 1;) {
      size_t j = static_cast<size_t>(interval(i));
      std::swap(values[i], values[j]);
    }
  }

 private:
  std::mt19937 mt_;
};

struct GPTIndices {
  int64_t tokens_per_epoch = 0;
  int64_t num_epochs = 0;
  bool separate_final_epoch = false;
  std::vector<int32_t> document_index;  // dataset sequence ids, epochs tiled and shuffled
  std::vector<int64_t> sample_index;    // [num_samples + 1][2]: (position in document_index, token offset)
  std::vector<int64_t> shuffle_index;   // permutation of [0, num_samples)
  int64_t num_samples() const { return static_cast<int64_t>(sample_index.size() / 2) - 1; }
};

// sequence_lengths: every sequence of the low-level dataset (indexed by sequence id);
// documents: the split's sequence ids (GPT splits by sequence). num_samples < 0 means one epoch
// (Megatron's num_samples=None). seq_length excludes the extra label token. ConfigError if the
// split has no tokens or not enough tokens for one sample.
GPTIndices build_gpt_indices(std::span<const int32_t> sequence_lengths, std::span<const int32_t> documents,
                             int64_t num_samples, int64_t seq_length, uint32_t seed);

// The pieces, exposed for tests.
std::vector<int32_t> build_document_index(std::span<const int32_t> documents, int64_t num_epochs,
                                          NumpyRandomState& rng, bool separate_final_epoch);
std::vector<int64_t> build_sample_index(std::span<const int32_t> sequence_lengths,
                                        std::span<const int32_t> document_index, int64_t seq_length,
                                        int64_t num_epochs, int64_t tokens_per_epoch);
std::vector<int64_t> build_shuffle_index(int64_t num_samples, int64_t total_size, NumpyRandomState& rng);

}  // namespace tessera::data
