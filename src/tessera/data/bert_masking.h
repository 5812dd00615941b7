// BERT's masking of one sample (Megatron's create_masked_lm_predictions, megatron-spec 2.7): the
// candidates are whole words (a WordPiece "##" continuation joins the word before it; [CLS] and
// [SEP] are never candidates); n_mask = min(max_predictions, max(1, round(tokens x mask_prob)));
// spans of n <= max_ngram words with P(n) ~ 1/n are chosen in a random order of the words until
// n_mask tokens are masked; each chosen token becomes [MASK] (80%), a random vocabulary id (10%)
// or stays (10%). Deterministic in the given random stream.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "tessera/core/rng.h"

namespace tessera::data {

struct MaskingOptions {
  double mask_prob = 0.15;
  int64_t max_ngram = 3;
  int32_t mask_id = 0;
  int64_t vocab_size = 0;      // random replacements are uniform in [0, vocab_size)
  int64_t max_predictions = 0;  // mask_prob x the sample's target length (0: no cap)
};

// Sequential draws from a counter-based stream.
struct Draws {
  RandomStream stream;
  uint64_t counter = 0;
  double uniform() { return stream.uniform_double(counter++); }
  uint64_t below(uint64_t n) { return stream.below(counter++, n); }
};

// tokens: the sample's real tokens (in/out); candidate[i]: 0 = never masked ([CLS], [SEP]), 1 =
// starts a word, 2 = continues the word before it (WordPiece "##"). Writes labels (the original
// id) and loss_mask (1) at the masked positions; returns how many were masked.
int64_t mask_tokens(std::span<int32_t> tokens, std::span<const uint8_t> candidate, const MaskingOptions& options,
                    Draws& draws, std::span<int32_t> labels, std::span<float> loss_mask);

}  // namespace tessera::data
