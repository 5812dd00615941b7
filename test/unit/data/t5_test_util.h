// Helpers for the T5 data tests: a sample's buffers, and the text a sample encodes (the encoder's
// tokens with each sentinel replaced by the span that follows it in the labels).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "tessera/data/sample_source.h"

namespace tessera::test {

struct T5Sample {
  std::vector<int32_t> tokens, decoder_tokens, labels;
  std::vector<float> loss_mask;
  std::vector<uint8_t> padding, decoder_padding;
  T5Sample(int64_t s, int64_t sd)
      : tokens(static_cast<size_t>(s)),
        decoder_tokens(static_cast<size_t>(sd)),
        labels(static_cast<size_t>(sd)),
        loss_mask(static_cast<size_t>(sd)),
        padding(static_cast<size_t>(s)),
        decoder_padding(static_cast<size_t>(sd)) {}
  data::Seq2SeqSample view() { return {tokens, decoder_tokens, labels, loss_mask, padding, decoder_padding}; }
  bool operator==(const T5Sample&) const = default;
};

inline T5Sample read_t5(const data::SampleSource& source, int64_t index) {
  T5Sample s(source.seq_length(), source.decoder_seq_length());
  auto view = s.view();
  source.seq2seq_sample(index, view);
  return s;
}

struct T5Layout {
  std::vector<int32_t> text;                        // the uncorrupted text
  std::vector<std::vector<int32_t>> spans;          // the masked spans in order
  int64_t encoder_length = 0, decoder_length = 0;   // real tokens
};

// Checks the layout (sentinels in order 0, 1, ... in the encoder and in the labels, the decoder
// input = [BOS] + labels shifted, [EOS] last, masks) and returns the text and spans.
inline T5Layout check_t5_layout(const T5Sample& s, const std::vector<int32_t>& sentinels, int32_t pad, int32_t bos,
                                int32_t eos) {
  T5Layout out;
  auto sentinel_index = [&](int32_t id) -> int64_t {
    auto it = std::find(sentinels.begin(), sentinels.end(), id);
    return it == sentinels.end() ? -1 : it - sentinels.begin();
  };
  while (out.encoder_length < static_cast<int64_t>(s.tokens.size()) && s.padding[static_cast<size_t>(out.encoder_length)])
    ++out.encoder_length;
  for (size_t i = 0; i < s.tokens.size(); ++i) {
    EXPECT_EQ(s.padding[i], i < static_cast<size_t>(out.encoder_length) ? 1 : 0) << i;
    if (i >= static_cast<size_t>(out.encoder_length)) {
      EXPECT_EQ(s.tokens[i], pad) << i;
    }
  }
  while (out.decoder_length < static_cast<int64_t>(s.decoder_tokens.size()) &&
         s.decoder_padding[static_cast<size_t>(out.decoder_length)])
    ++out.decoder_length;
  const size_t d = static_cast<size_t>(out.decoder_length);
  EXPECT_GE(d, 1u);
  EXPECT_EQ(s.decoder_tokens[0], bos);
  for (size_t i = 0; i < s.decoder_tokens.size(); ++i) {
    EXPECT_EQ(s.decoder_padding[i], i < d ? 1 : 0) << i;
    EXPECT_EQ(s.loss_mask[i], i < d ? 1.0f : 0.0f) << i;
    if (i + 1 < d) {
      EXPECT_EQ(s.decoder_tokens[i + 1], s.labels[i]) << "decoder input = labels shifted right, " << i;
    }
    if (i >= d) {
      EXPECT_EQ(s.decoder_tokens[i], pad) << i;
      EXPECT_EQ(s.labels[i], pad) << i;
    }
  }
  EXPECT_EQ(s.labels[d - 1], eos);
  // Labels: s0 span0 s1 span1 ... [EOS].
  int64_t next = 0;
  for (size_t i = 0; i + 1 < d; ++i) {
    const int64_t k = sentinel_index(s.labels[i]);
    if (k >= 0) {
      EXPECT_EQ(k, next++) << "sentinels in order";
      out.spans.emplace_back();
    } else {
      EXPECT_FALSE(out.spans.empty()) << "the labels start with a sentinel";
      if (!out.spans.empty()) out.spans.back().push_back(s.labels[i]);
    }
  }
  for (const auto& span : out.spans) EXPECT_FALSE(span.empty()) << "an empty span";
  // Encoder: the text with sentinel k in place of span k.
  int64_t seen = 0;
  for (int64_t i = 0; i < out.encoder_length; ++i) {
    const int32_t id = s.tokens[static_cast<size_t>(i)];
    const int64_t k = sentinel_index(id);
    if (k < 0) {
      out.text.push_back(id);
      continue;
    }
    EXPECT_EQ(k, seen) << "encoder sentinels in order";
    if (k >= static_cast<int64_t>(out.spans.size())) break;
    out.text.insert(out.text.end(), out.spans[static_cast<size_t>(k)].begin(), out.spans[static_cast<size_t>(k)].end());
    ++seen;
  }
  EXPECT_EQ(seen, static_cast<int64_t>(out.spans.size())) << "every span has its sentinel in the encoder";
  return out;
}

}  // namespace tessera::test
