#include "tessera/data/gpt_dataset_indices.h"

#include <numeric>

#include "tessera/core/error.h"

namespace tessera::data {

namespace {
constexpr int64_t kExtraToken = 1;  // Megatron's add_extra_token_to_sequence (labels = tokens shifted by one)
}

uint64_t NumpyRandomState::interval(uint64_t max) {
  if (max == 0) return 0;
  uint64_t mask = max;
  mask |= mask >> 1;
  mask |= mask >> 2;
  mask |= mask >> 4;
  mask |= mask >> 8;
  mask |= mask >> 16;
  mask |= mask >> 32;
  uint64_t value;
  if (max <= 0xffffffffull) {
    while ((value = (next_uint32() & mask)) > max) {
    }
  } else {
    while ((value = (next_uint64() & mask)) > max) {
    }
  }
  return value;
}

std::vector<int32_t> build_document_index(std::span<const int32_t> documents, int64_t num_epochs,
                                          NumpyRandomState& rng, bool separate_final_epoch) {
  if (!separate_final_epoch || num_epochs == 1) {
    std::vector<int32_t> index;
    index.reserve(documents.size() * static_cast<size_t>(num_epochs));
    for (int64_t e = 0; e < num_epochs; ++e) index.insert(index.end(), documents.begin(), documents.end());
    rng.shuffle(std::span<int32_t>(index));
    return index;
  }
  std::vector<int32_t> first = build_document_index(documents, num_epochs - 1, rng, false);
  std::vector<int32_t> last = build_document_index(documents, 1, rng, false);
  first.insert(first.end(), last.begin(), last.end());
  return first;
}

std::vector<int64_t> build_sample_index(std::span<const int32_t> sequence_lengths,
                                        std::span<const int32_t> document_index, int64_t seq_length,
                                        int64_t num_epochs, int64_t tokens_per_epoch) {
  // helpers.cpp build_sample_idx: walk the documents, each sample takes seq_length + 1 tokens and
  // the next one starts on the last of them.
  const int64_t num_samples = (num_epochs * tokens_per_epoch - kExtraToken) / seq_length;
  std::vector<int64_t> sample(2 * static_cast<size_t>(num_samples + 1));
  int64_t document_position = 0, document_offset = 0;
  sample[0] = 0;
  sample[1] = 0;
  for (int64_t s = 1; s <= num_samples; ++s) {
    int64_t remaining = seq_length + kExtraToken;
    while (remaining != 0) {
      TESSERA_CHECK(document_position < static_cast<int64_t>(document_index.size()),
                    "sample index ran past the document index at sample ", s);
      const int64_t document = document_index[static_cast<size_t>(document_position)];
      const int64_t length = sequence_lengths[static_cast<size_t>(document)] - document_offset;
      remaining -= length;
      if (remaining <= 0) {
        document_offset += remaining + length - kExtraToken;
        remaining = 0;
      } else {
        ++document_position;
        document_offset = 0;
      }
    }
    sample[2 * static_cast<size_t>(s)] = document_position;
    sample[2 * static_cast<size_t>(s) + 1] = document_offset;
  }
  return sample;
}

std::vector<int64_t> build_shuffle_index(int64_t num_samples, int64_t total_size, NumpyRandomState& rng) {
  std::vector<int64_t> index(static_cast<size_t>(total_size));
  std::iota(index.begin(), index.end(), int64_t{0});
  rng.shuffle(std::span<int64_t>(index.data(), static_cast<size_t>(num_samples)));
  if (num_samples != total_size)
    rng.shuffle(std::span<int64_t>(index.data() + num_samples, static_cast<size_t>(total_size - num_samples)));
  return index;
}

GPTIndices build_gpt_indices(std::span<const int32_t> sequence_lengths, std::span<const int32_t> documents,
                             int64_t num_samples, int64_t seq_length, uint32_t seed) {
  TESSERA_CHECK(seq_length > 0, "seq_length must be positive, got ", seq_length);
  GPTIndices out;
  for (int32_t d : documents) out.tokens_per_epoch += sequence_lengths[static_cast<size_t>(d)];
  if (out.tokens_per_epoch <= seq_length)
    TESSERA_CONFIG_FAIL("the split has ", out.tokens_per_epoch, " tokens in ", documents.size(),
                        " documents, fewer than one sample of seq_length + 1 = ", seq_length + 1,
                        " tokens; use more data, a wider split or a shorter seq_length");
  const int64_t T = out.tokens_per_epoch;
  out.num_epochs = 1;
  if (num_samples >= 0) {
    const int64_t requested = num_samples * seq_length + kExtraToken;
    int64_t tokens = T;
    while (tokens < requested) {
      ++out.num_epochs;
      tokens += T;
    }
  }
  int64_t samples_before_final = 0;
  if (out.num_epochs > 1) {
    samples_before_final = ((out.num_epochs - 1) * T - kExtraToken) / seq_length;
    const int64_t from_final = num_samples - samples_before_final;
    const int64_t per_epoch = (T - kExtraToken) / seq_length;
    TESSERA_CHECK(from_final >= 0 && from_final <= per_epoch + 1, "inconsistent epoch arithmetic");
    out.separate_final_epoch = from_final < static_cast<int64_t>(0.80 * static_cast<double>(per_epoch));
  }
  NumpyRandomState rng(seed);
  out.document_index = build_document_index(documents, out.num_epochs, rng, out.separate_final_epoch);
  out.sample_index = build_sample_index(sequence_lengths, out.document_index, seq_length, out.num_epochs, T);
  const int64_t total = out.num_samples();
  out.shuffle_index = build_shuffle_index(out.separate_final_epoch ? samples_before_final : total, total, rng);
  return out;
}

}  // namespace tessera::data
