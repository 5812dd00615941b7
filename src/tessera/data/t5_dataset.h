// T5Dataset: T5 span-corruption samples from a sentence-split indexed dataset (tessera-preprocess
// --split-sentences), as Megatron's T5 dataset builds them (megatron-spec 2.8): the shared sentence
// sample map (sentence_sample_map.h: target = encoder seq_length - 2, or a short one with
// probability short_seq_prob; at least one sentence per entry), then per sample the entry's
// sentences joined, truncated to the target, span-corrupted (t5_span_corruption.h: whole words,
// mask_prob 0.15, geometric spans clipped to 10 words) and laid out as encoder tokens with
// sentinels, decoder input [BOS] + target, labels target + [EOS], padded to seq_length and
// decoder_seq_length. Deterministic per seed (sample i draws from its own stream).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "tessera/data/indexed_dataset.h"
#include "tessera/data/sample_source.h"
#include "tessera/data/sentence_sample_map.h"

namespace tessera::data {

struct T5DatasetConfig {
  int64_t seq_length = 512, decoder_seq_length = 128;
  uint64_t seed = 1234;
  double mask_prob = 0.15, short_seq_prob = 0.1;
  int64_t num_samples = 0;             // entries the map holds at least
  int32_t pad = 0, bos = 1, eos = 2;   // bos: the decoder's start token
  std::vector<int32_t> sentinels;      // <extra_id_0>, <extra_id_1>, ... (data.vocab_extra_ids)
  std::vector<uint8_t> continuation;   // per id: 1 = a WordPiece "##" piece (joins the word before)
};

class T5Dataset : public SampleSource {
 public:
  static constexpr int64_t kMaxSentenceTokens = 512;
  // Documents [first_document, end_document) of `data`. ConfigError naming the dataset when no
  // document gives a sample, or when there are no sentinels.
  T5Dataset(std::shared_ptr<const IndexedDataset> data, int64_t first_document, int64_t end_document,
            T5DatasetConfig config, const std::string& name);
  int64_t num_samples() const override { return static_cast<int64_t>(map_.size()); }
  int64_t seq_length() const override { return config_.seq_length; }
  void sample(int64_t index, std::span<int32_t> tokens, std::span<float> loss_mask) const override;
  bool seq2seq() const override { return true; }
  int64_t decoder_seq_length() const override { return config_.decoder_seq_length; }
  void seq2seq_sample(int64_t index, Seq2SeqSample& out) const override;
  const std::vector<SentenceSpan>& sample_map() const { return map_; }

 private:
  std::shared_ptr<const IndexedDataset> data_;
  T5DatasetConfig config_;
  std::vector<SentenceSpan> map_;
};

}  // namespace tessera::data
