// The sentence-level sample map shared by BERT and T5 (Megatron's helpers.cpp build_mapping,
// megatron-spec 2.7/2.8): over sentence-split documents (tessera-preprocess --split-sentences:
// each document's sentences are its sequences), skipping documents with fewer than min_sentences
// sentences or any sentence over max_sentence_tokens, accumulate whole sentences until their length
// reaches the target (max_length, or with probability 1/round(1/short_seq_prob) a random
// 2..max_length) and more than one sentence remains; each run of at least min_sentences sentences
// becomes an entry (first sentence, end, target). Epochs repeat until num_samples entries, then the
// entries are shuffled. Every draw comes from one stream (seed, stream), so the map is a pure
// function of its inputs. BERT: max_length = seq_length - 3, min_sentences 2; T5: max_length =
// encoder seq_length - 2, min_sentences 1.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/data/indexed_dataset.h"

namespace tessera::data {

struct SentenceSpan {
  int64_t first_sentence, end_sentence, target;
  bool operator==(const SentenceSpan&) const = default;
};

struct SentenceSampleMapOptions {
  int64_t max_length = 0;           // the target length without the special tokens (>= 2)
  double short_seq_prob = 0.1;      // 0: every target is max_length
  int64_t min_sentences = 1;        // per entry (BERT's sentence pairs: 2)
  int64_t num_samples = 0;          // entries the map holds at least (epochs repeat)
  int64_t max_sentence_tokens = 512;
  uint64_t seed = 1234;
  uint64_t stream = 0;              // the RandomStream id (stream_id("bert_sample_map") for BERT)
};

// Documents [first_document, end_document) of `data`. ConfigError naming `name` when no document
// gives an entry (not sentence-split data, or every sentence too long).
std::vector<SentenceSpan> build_sentence_sample_map(const IndexedDataset& data, int64_t first_document,
                                                    int64_t end_document, const SentenceSampleMapOptions& options,
                                                    const std::string& name);

}  // namespace tessera::data
