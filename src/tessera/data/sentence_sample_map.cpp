#include "tessera/data/sentence_sample_map.h"

#include <algorithm>
#include <cmath>

#include "tessera/core/error.h"
#include "tessera/data/bert_masking.h"

namespace tessera::data {

std::vector<SentenceSpan> build_sentence_sample_map(const IndexedDataset& data, int64_t first_document,
                                                    int64_t end_document, const SentenceSampleMapOptions& options,
                                                    const std::string& name) {
  const int64_t max_len = options.max_length, min_sent = std::max<int64_t>(options.min_sentences, 1);
  TESSERA_CHECK(max_len >= 2, "sentence sample map of ", name, ": target length ", max_len, " is below 2");
  TESSERA_CHECK(first_document >= 0 && end_document <= data.document_count() && first_document <= end_document,
                "sentence sample map document range [", first_document, ", ", end_document, ") outside ", name);
  std::vector<SentenceSpan> map;
  Draws draws{RandomStream(options.seed, options.stream), 0};
  const int64_t short_every = options.short_seq_prob > 0 ? std::llround(1.0 / options.short_seq_prob) : 0;
  auto draw_target = [&] {
    if (short_every > 0 && draws.below(static_cast<uint64_t>(short_every)) == 0)
      return 2 + static_cast<int64_t>(draws.below(static_cast<uint64_t>(max_len - 1)));
    return max_len;
  };
  const int64_t wanted = std::max<int64_t>(options.num_samples, 1);
  while (static_cast<int64_t>(map.size()) < wanted) {
    const size_t before = map.size();
    for (int64_t d = first_document; d < end_document; ++d) {
      const int64_t first = data.document_index(d), end = data.document_index(d + 1);
      if (end - first < min_sent) continue;
      bool too_long = false;
      for (int64_t s = first; s < end; ++s)
        too_long = too_long || data.sequence_length(s) > options.max_sentence_tokens;
      if (too_long) continue;
      int64_t target = draw_target(), start = first, length = 0;
      for (int64_t s = first; s < end; ++s) {
        length += data.sequence_length(s);
        const int64_t remaining = end - s - 1, sentences = s - start + 1;
        if ((length >= target && remaining > 1 && sentences >= min_sent) || remaining == 0) {
          if (sentences >= min_sent) map.push_back({start, s + 1, target});
          start = s + 1;
          length = 0;
          target = draw_target();
        }
      }
    }
    if (map.size() == before)
      TESSERA_CONFIG_FAIL(name, ": no document has ", min_sent == 1 ? std::string("a sentence") : min_sent == 2 ? std::string("two sentences") : std::to_string(min_sent) + " sentences",
                          " of at most ", options.max_sentence_tokens, " tokens",
                          min_sent == 2 ? "; BERT needs sentence-split data (tessera-preprocess --split-sentences)"
                                        : " (sentence-split data: tessera-preprocess --split-sentences)");
  }
  for (size_t i = map.size(); i > 1; --i) std::swap(map[i - 1], map[draws.below(i)]);
  return map;
}

}  // namespace tessera::data
