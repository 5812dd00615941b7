#include "tessera/data/bert_masking.h"

#include <algorithm>
#include <cmath>

#include "tessera/core/error.h"

namespace tessera::data {

int64_t mask_tokens(std::span<int32_t> tokens, std::span<const uint8_t> candidate, const MaskingOptions& options,
                    Draws& draws, std::span<int32_t> labels, std::span<float> loss_mask) {
  const size_t n = tokens.size();
  TESSERA_CHECK(candidate.size() == n && labels.size() >= n && loss_mask.size() >= n,
                "mask_tokens: tokens, candidates, labels and loss mask differ in length");
  TESSERA_CHECK(options.vocab_size > 0 && options.max_ngram >= 1, "mask_tokens: bad options");
  // Whole words: [first, end) token ranges.
  std::vector<std::pair<size_t, size_t>> words;
  for (size_t i = 0; i < n; ++i) {
    if (candidate[i] == 0) continue;
    if (candidate[i] == 2 && !words.empty() && words.back().second == i) words.back().second = i + 1;
    else words.emplace_back(i, i + 1);
  }
  int64_t n_mask = std::max<int64_t>(1, std::llround(static_cast<double>(n) * options.mask_prob));
  if (options.max_predictions > 0) n_mask = std::min(n_mask, options.max_predictions);
  // P(ngram = k) ~ 1/k, k = 1..max_ngram.
  std::vector<double> cumulative;
  double total = 0;
  for (int64_t k = 1; k <= options.max_ngram; ++k) cumulative.push_back(total += 1.0 / static_cast<double>(k));
  // A random order of the word starts (Fisher-Yates).
  std::vector<size_t> order(words.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[draws.below(i)]);
  std::vector<uint8_t> covered(words.size(), 0);
  int64_t masked = 0;
  for (size_t start : order) {
    if (masked >= n_mask) break;
    const double u = draws.uniform() * total;
    int64_t k = 1;
    while (k < options.max_ngram && u >= cumulative[static_cast<size_t>(k - 1)]) ++k;
    // Shorten the span to the words left and to the budget (Megatron tries shorter n-grams).
    for (; k >= 1; --k) {
      const size_t last = std::min(words.size(), start + static_cast<size_t>(k));
      bool free = true;
      int64_t length = 0;
      for (size_t w = start; w < last; ++w) {
        free = free && !covered[w];
        length += static_cast<int64_t>(words[w].second - words[w].first);
      }
      if (!free || masked + length > n_mask) continue;
      for (size_t w = start; w < last; ++w) {
        covered[w] = 1;
        for (size_t t = words[w].first; t < words[w].second; ++t) {
          labels[t] = tokens[t];
          loss_mask[t] = 1.0f;
          const double r = draws.uniform();
          if (r < 0.8) tokens[t] = options.mask_id;
          else if (r < 0.9) tokens[t] = static_cast<int32_t>(draws.below(static_cast<uint64_t>(options.vocab_size)));
        }
      }
      masked += length;
      break;
    }
  }
  return masked;
}

}  // namespace tessera::data
