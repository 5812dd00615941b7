#include "tessera/data/t5_span_corruption.h"

#include <algorithm>
#include <cmath>

#include "tessera/core/error.h"

namespace tessera::data {

int64_t draw_span_words(Draws& draws, double p, int64_t max_n) {
  const double u = draws.uniform();  // [0, 1)
  const double n = 1.0 + std::floor(std::log1p(-u) / std::log1p(-p));
  return n >= static_cast<double>(max_n) ? max_n : std::max<int64_t>(1, static_cast<int64_t>(n));
}

std::vector<MaskedSpan> choose_t5_spans(std::span<const uint8_t> candidate, const SpanCorruptionOptions& options,
                                        Draws& draws) {
  TESSERA_CHECK(options.max_ngram >= 1 && options.geometric_p > 0 && options.geometric_p < 1,
                "choose_t5_spans: bad options");
  const size_t n = candidate.size();
  std::vector<std::pair<size_t, size_t>> words;  // whole words: [first, end) token ranges
  for (size_t i = 0; i < n; ++i) {
    if (candidate[i] == 0) continue;
    if (candidate[i] == 2 && !words.empty() && words.back().second == i) words.back().second = i + 1;
    else words.emplace_back(i, i + 1);
  }
  int64_t n_mask = std::max<int64_t>(1, std::llround(static_cast<double>(n) * options.mask_prob));
  if (options.max_predictions > 0) n_mask = std::min(n_mask, options.max_predictions);
  std::vector<size_t> order(words.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[draws.below(i)]);
  std::vector<uint8_t> covered(words.size(), 0);
  std::vector<std::pair<size_t, size_t>> chosen;  // word ranges
  int64_t masked = 0;
  auto tokens_of = [&](size_t first_word, size_t end_word) {
    return static_cast<int64_t>(words[end_word - 1].second - words[first_word].first);
  };
  for (size_t start : order) {
    if (masked >= n_mask) break;
    if (options.max_spans > 0 && static_cast<int64_t>(chosen.size()) >= options.max_spans) break;
    int64_t k = draw_span_words(draws, options.geometric_p, options.max_ngram);
    size_t end = std::min(words.size(), start + static_cast<size_t>(k));
    // Megatron tries shorter n-grams while the span would exceed the budget.
    while (masked + tokens_of(start, end) > n_mask && end - start > 1) --end;
    const int64_t length = tokens_of(start, end);
    if (masked + length > n_mask) continue;
    // The decoder input holds [BOS], every sentinel and every masked token.
    if (options.max_decoder_tokens > 0 &&
        1 + masked + length + static_cast<int64_t>(chosen.size()) + 1 > options.max_decoder_tokens)
      continue;
    bool overlaps = false;
    for (size_t w = start; w < end; ++w) overlaps = overlaps || covered[w];
    if (overlaps) continue;
    for (size_t w = start; w < end; ++w) covered[w] = 1;
    chosen.emplace_back(start, end);
    masked += length;
  }
  std::sort(chosen.begin(), chosen.end());
  std::vector<MaskedSpan> spans;
  spans.reserve(chosen.size());
  for (const auto& [first, end] : chosen) spans.push_back({words[first].first, words[end - 1].second});
  return spans;
}

void write_t5_sample(std::span<const int32_t> tokens, const std::vector<MaskedSpan>& spans, const T5SpecialIds& ids,
                     Seq2SeqSample& out) {
  const size_t enc = out.tokens.size(), dec = out.decoder_tokens.size();
  TESSERA_CHECK(out.padding_mask.size() == enc && out.labels.size() == dec && out.loss_mask.size() == dec &&
                    out.decoder_padding_mask.size() == dec,
                "write_t5_sample: the encoder spans need ", enc, " entries and the decoder spans ", dec);
  TESSERA_CHECK(spans.size() <= ids.sentinels.size(), "T5 sample: ", spans.size(), " masked spans but only ",
                ids.sentinels.size(), " sentinel tokens (data.vocab_extra_ids)");
  std::fill(out.tokens.begin(), out.tokens.end(), ids.pad);
  std::fill(out.decoder_tokens.begin(), out.decoder_tokens.end(), ids.pad);
  std::fill(out.labels.begin(), out.labels.end(), ids.pad);
  std::fill(out.loss_mask.begin(), out.loss_mask.end(), 0.0f);
  std::fill(out.padding_mask.begin(), out.padding_mask.end(), uint8_t{0});
  std::fill(out.decoder_padding_mask.begin(), out.decoder_padding_mask.end(), uint8_t{0});
  size_t e = 0, d = 0, start = 0;
  auto put_enc = [&](int32_t id) {
    TESSERA_CHECK(e < enc, "T5 sample: the corrupted text exceeds the encoder length ", enc);
    out.tokens[e++] = id;
  };
  auto put_dec = [&](int32_t id) {  // decoder input at d, label at d - 1
    TESSERA_CHECK(d < dec, "T5 sample: the masked spans exceed model.decoder_seq_length = ", dec);
    out.decoder_tokens[d] = id;
    if (d > 0) out.labels[d - 1] = id;
    ++d;
  };
  put_dec(ids.bos);
  for (size_t k = 0; k < spans.size(); ++k) {
    const MaskedSpan& span = spans[k];
    TESSERA_CHECK(span.first >= start && span.end > span.first && span.end <= tokens.size(),
                  "T5 sample: spans overlap or leave the text");
    for (size_t i = start; i < span.first; ++i) put_enc(tokens[i]);
    const int32_t sentinel = ids.sentinels[k];
    put_enc(sentinel);
    put_dec(sentinel);
    for (size_t i = span.first; i < span.end; ++i) put_dec(tokens[i]);
    start = span.end;
  }
  for (size_t i = start; i < tokens.size(); ++i) put_enc(tokens[i]);
  out.labels[d - 1] = ids.eos;  // labels = decoder input shifted left, then [EOS]
  std::fill(out.padding_mask.begin(), out.padding_mask.begin() + static_cast<std::ptrdiff_t>(e), uint8_t{1});
  std::fill(out.decoder_padding_mask.begin(), out.decoder_padding_mask.begin() + static_cast<std::ptrdiff_t>(d),
            uint8_t{1});
  std::fill(out.loss_mask.begin(), out.loss_mask.begin() + static_cast<std::ptrdiff_t>(d), 1.0f);
}

}  // namespace tessera::data
