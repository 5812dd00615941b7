// T5's span corruption of one sample (Megatron's create_masked_lm_predictions with
// masking_style = "t5", geometric_dist = True, max_ngrams = 10, then pad_and_convert_to_numpy of
// t5_dataset.py; megatron-spec 2.8).
//
// Choosing spans: the candidates are whole words (a WordPiece "##" continuation joins the word
// before it); n_mask = min(max_predictions, max(1, round(tokens x mask_prob))); the words are
// visited in a random order and each start draws a span of n = min(Geometric(p = 0.2), 10) words,
// shortened (n-1, n-2, ...) until it fits the budget of n_mask tokens, skipped if it still does
// not or if it overlaps a chosen span. Adjacent spans stay separate (each has its own sentinel),
// as in Megatron. Note: the "mean span 3" of the T5 paper is not what Megatron draws: the clipped
// geometric has mean (1 - 0.8^10) / 0.2 = 4.46 words, and the budget and the sequence end shorten
// some spans, so realised spans average a little less (t5_span_corruption_test measures it).
//
// Layout (Seq2SeqSample): encoder = the text with each span replaced by the next sentinel
// (sentinels[0], sentinels[1], ...), padded; decoder input = [BOS] s0 span0 s1 span1 ...;
// labels = s0 span0 s1 span1 ... [EOS]; loss_mask 1 on the len(decoder input) real labels;
// padding masks 1 on real tokens. Megatron pads labels with -1; here they are padded with the pad
// id (the loss mask is the authority). Two caps Megatron asserts instead: at most
// sentinels.size() spans, and the decoder input (1 + masked tokens + spans) within its length.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "tessera/data/bert_masking.h"
#include "tessera/data/sample_source.h"

namespace tessera::data {

struct SpanCorruptionOptions {
  double mask_prob = 0.15;
  int64_t max_ngram = 10;
  double geometric_p = 0.2;     // SpanBERT's p (Megatron's)
  int64_t max_predictions = 0;  // mask_prob x the sample's target length (0: no cap)
  int64_t max_spans = 0;        // the sentinels available (0: no cap)
  int64_t max_decoder_tokens = 0;  // decoder_seq_length (0: no cap)
};

struct MaskedSpan {
  size_t first, end;  // the token range [first, end)
};

// min(Geometric(p), max_n): 1 + floor(log(1 - u) / log(1 - p)), clipped; one draw.
int64_t draw_span_words(Draws& draws, double p, int64_t max_n);

// candidate[i]: 0 = never masked, 1 = starts a word, 2 = continues the word before it. Returns the
// chosen spans sorted by position. Deterministic in the given stream.
std::vector<MaskedSpan> choose_t5_spans(std::span<const uint8_t> candidate, const SpanCorruptionOptions& options,
                                        Draws& draws);

struct T5SpecialIds {
  int32_t pad = 0, bos = 1, eos = 2;
  std::span<const int32_t> sentinels;  // <extra_id_0>, <extra_id_1>, ...
};

// Writes the sample of `tokens` with `spans` corrupted into out (every span sized: encoder spans the
// encoder length, decoder spans the decoder length). Throws Error if a part does not fit.
void write_t5_sample(std::span<const int32_t> tokens, const std::vector<MaskedSpan>& spans, const T5SpecialIds& ids,
                     Seq2SeqSample& out);

}  // namespace tessera::data
