// BertDataset: BERT samples from a sentence-split indexed dataset (tessera-preprocess
// --split-sentences: each document's sentences are its sequences), as Megatron builds them
// (megatron-spec 2.7). The sample map walks the documents (those with at least 2 sentences and no
// sentence over 512 tokens) accumulating sentences until their length reaches the target
// (seq_length - 3, or with probability short_seq_prob a random 2..seq_length-3) and more than one
// sentence remains; each entry (first sentence, end, target) becomes one sample; epochs repeat
// until num_samples entries, then the map is shuffled. Sample i: A|B split at a random sentence
// boundary, swapped with probability 1/2 (is_random: sentence order), the longer of A/B trimmed
// from a random end until |A| + |B| <= target, [CLS] A [SEP] B [SEP] with token types 0/1, whole-
// word masking (bert_masking.h: 15%, 80/10/10), padded to seq_length. Deterministic per seed.
#pragma once
#include <memory>
#include <vector>

#include "tessera/data/indexed_dataset.h"
#include "tessera/data/sample_source.h"
#include "tessera/data/sentence_sample_map.h"

namespace tessera::data {

struct BertDatasetConfig {
  int64_t seq_length = 512;
  uint64_t seed = 1234;
  double mask_prob = 0.15, short_seq_prob = 0.1;
  int64_t num_samples = 0;                 // entries the map holds at least
  int32_t cls = 101, sep = 102, pad = 0, mask = 103;
  int64_t vocab_size = 0;                  // random replacements in [0, vocab_size)
  std::vector<uint8_t> continuation;       // per id: 1 = a WordPiece "##" piece (joins the word before)
};

class BertDataset : public SampleSource {
 public:
  static constexpr int64_t kMaxSentenceTokens = 512;
  // Documents [first_document, end_document) of `data`. ConfigError naming the dataset when no
  // document has two sentences.
  BertDataset(std::shared_ptr<const IndexedDataset> data, int64_t first_document, int64_t end_document,
              BertDatasetConfig config, const std::string& name);
  int64_t num_samples() const override { return static_cast<int64_t>(map_.size()); }
  int64_t seq_length() const override { return config_.seq_length; }
  void sample(int64_t index, std::span<int32_t> tokens, std::span<float> loss_mask) const override;
  bool masked_lm() const override { return true; }
  void masked_lm_sample(int64_t index, MaskedLmSample& out) const override;

  using Entry = SentenceSpan;  // sentence_sample_map.h
  const std::vector<Entry>& sample_map() const { return map_; }

 private:
  std::shared_ptr<const IndexedDataset> data_;
  BertDatasetConfig config_;
  std::vector<Entry> map_;
};

}  // namespace tessera::data
