// T5Dataset over a sentence-split indexed dataset: the shared sentence sample map with one sentence
// allowed per entry, the encoder/decoder lengths, each sample's text = its entry's sentences
// truncated to the target, sentinel layout, whole-word spans, determinism per seed, masking within
// 1% of mask_prob over 10k samples, and a round trip of one WordPiece sample through the tokenizer.
#include <gtest/gtest.h>

#include <cmath>

#include "data/data_test_util.h"
#include "data/t5_test_util.h"
#include "tessera/core/error.h"
#include "tessera/data/indexed_dataset_builder.h"
#include "tessera/data/t5_dataset.h"
#include "tessera/data/tokenizer_bert_wordpiece.h"
#include "test_paths.h"

namespace tessera {
namespace {

using data::T5Dataset;

const std::vector<int32_t> kSentinels = {999, 998, 997, 996, 995, 994, 993, 992, 991, 990, 989, 988, 987, 986,
                                         985, 984, 983, 982, 981, 980, 979, 978, 977, 976, 975, 974, 973, 972};

// Document d, sentence k: ids 100 + 10 d + k (k % 4 + 5 of them). Document 3 has one sentence.
std::string write_sentences(const std::string& dir, int documents = 8) {
  const std::string prefix = dir + "/sentences";
  data::IndexedDatasetBuilder builder(prefix + ".bin", data::IndexDType::int32);
  for (int d = 0; d < documents; ++d) {
    const int sentences = d == 3 ? 1 : 3 + d % 3;
    for (int k = 0; k < sentences; ++k) builder.add_item(std::vector<int32_t>(static_cast<size_t>(k % 4 + 5), 100 + 10 * (d % 8) + k));
    builder.end_document();
  }
  builder.finalize(prefix + ".idx");
  return prefix;
}

data::T5DatasetConfig config(int64_t seq, int64_t dec, int64_t samples, uint64_t seed) {
  data::T5DatasetConfig c;
  c.seq_length = seq;
  c.decoder_seq_length = dec;
  c.seed = seed;
  c.num_samples = samples;
  c.pad = 0;
  c.bos = 1;
  c.eos = 2;
  c.sentinels = kSentinels;
  return c;
}

TEST(T5Dataset, SamplesAreTheEntrySentencesCorrupted) {
  test::TempDir dir;
  auto indexed = std::make_shared<const data::IndexedDataset>(write_sentences(dir.path().string()));
  const int64_t seq = 24, dec = 12;
  T5Dataset d(indexed, 0, 8, config(seq, dec, 300, 5), "test");
  ASSERT_GE(d.num_samples(), 300);
  bool one_sentence_doc = false, short_target = false;
  for (int64_t i = 0; i < d.num_samples(); ++i) {
    const auto& e = d.sample_map()[static_cast<size_t>(i)];
    EXPECT_GE(e.end_sentence - e.first_sentence, 1);
    EXPECT_LE(e.target, seq - 2);
    one_sentence_doc = one_sentence_doc || e.first_sentence == indexed->document_index(3);
    short_target = short_target || e.target < seq - 2;
    std::vector<int32_t> expected;
    for (int64_t k = e.first_sentence; k < e.end_sentence; ++k) {
      std::vector<int32_t> sentence(static_cast<size_t>(indexed->sequence_length(k)));
      indexed->read(k, 0, indexed->sequence_length(k), sentence.data());
      expected.insert(expected.end(), sentence.begin(), sentence.end());
    }
    if (static_cast<int64_t>(expected.size()) > e.target) expected.resize(static_cast<size_t>(e.target));
    const auto s = test::read_t5(d, i);
    const auto layout = test::check_t5_layout(s, kSentinels, 0, 1, 2);
    EXPECT_EQ(layout.text, expected) << "sample " << i;
    EXPECT_LE(layout.encoder_length, seq);
    EXPECT_LE(layout.decoder_length, dec);
    if (HasFailure()) FAIL() << "sample " << i;
  }
  EXPECT_TRUE(one_sentence_doc) << "T5 takes one-sentence documents (min_sentences 1)";
  EXPECT_TRUE(short_target) << "short_seq_prob gives shorter targets";
}

TEST(T5Dataset, DeterministicPerSeedAndMaskingProportionOver10kSamples) {
  test::TempDir dir;
  // 64 documents of 3-5 sentences of 20-80 tokens.
  const std::string prefix = dir / "long";
  {
    data::IndexedDatasetBuilder builder(prefix + ".bin", data::IndexDType::int32);
    for (int d = 0; d < 64; ++d) {
      for (int k = 0; k < 3 + d % 3; ++k)
        builder.add_item(std::vector<int32_t>(static_cast<size_t>(20 + (7 * d + 13 * k) % 61), 100 + d));
      builder.end_document();
    }
    builder.finalize(prefix + ".idx");
  }
  auto indexed = std::make_shared<const data::IndexedDataset>(prefix);
  const int64_t seq = 256, dec = 64;
  T5Dataset a(indexed, 0, 64, config(seq, dec, 10000, 3), "a"), b(indexed, 0, 64, config(seq, dec, 10000, 3), "b"),
      c(indexed, 0, 64, config(seq, dec, 10000, 4), "c");
  int differ = 0;
  double masked = 0, real = 0, budget = 0, full_masked = 0, full_real = 0;
  for (int64_t i = 0; i < 10000; ++i) {
    const auto s = test::read_t5(a, i);
    if (i < 200) {
      EXPECT_EQ(s, test::read_t5(b, i));
      differ += !(s == test::read_t5(c, i));
    }
    const auto layout = test::check_t5_layout(s, kSentinels, 0, 1, 2);
    const double n = static_cast<double>(layout.text.size());
    double m = 0;
    for (const auto& span : layout.spans) m += static_cast<double>(span.size());
    const int64_t target = a.sample_map()[static_cast<size_t>(i)].target;
    // Megatron's budget: min(int(0.15 x target), max(1, round(0.15 x n))).
    budget += static_cast<double>(std::min<int64_t>(static_cast<int64_t>(0.15 * static_cast<double>(target)),
                                                    std::max<int64_t>(1, std::llround(0.15 * n))));
    masked += m, real += n;
    if (target == seq - 2) full_masked += m, full_real += n;
  }
  EXPECT_GT(differ, 150);
  // Over every sample (short targets included) the masked tokens fill Megatron's budgets; over the
  // full-length samples the proportion is mask_prob within 1% (relative).
  EXPECT_NEAR(masked / budget, 1.0, 0.01) << masked << " masked, budget " << budget;
  EXPECT_NEAR(full_masked / full_real, 0.15, 0.01 * 0.15) << full_masked << " / " << full_real;
  std::printf("T5Dataset: masked %.5f of all tokens, %.5f of full-length samples' tokens\n", masked / real,
              full_masked / full_real);
}

TEST(T5Dataset, NeedsSentinelsAndSentences) {
  test::TempDir dir;
  auto indexed = std::make_shared<const data::IndexedDataset>(write_sentences(dir.path().string()));
  auto c = config(24, 12, 10, 1);
  c.sentinels.clear();
  EXPECT_THROW(T5Dataset(indexed, 0, 8, c, "x"), ConfigError);
  try {
    T5Dataset d(indexed, 2, 2, config(24, 12, 10, 1), "empty split");
    ADD_FAILURE() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("empty split"), std::string::npos) << e.what();
  }
}

// A WordPiece-tokenized text with vocab_extra_ids sentinels (Megatron's T5 vocabulary): the
// sample's text detokenizes to the sentences, spans are whole words, sentinels read <extra_id_k>.
TEST(T5Dataset, RoundTripThroughTheWordPieceTokenizer) {
  const std::string vocab = (test::shared_dir() / "data/tokenizers/bert-base-uncased/vocab.txt").string();
  data::BertWordPieceTokenizer tok(vocab, true, 100);
  ASSERT_EQ(tok.vocab_size(), 30522 + 2 + 100);
  ASSERT_EQ(tok.additional_special_token_ids().size(), 100u);
  EXPECT_EQ(tok.id_to_token(tok.additional_special_token_ids()[0]), "<extra_id_0>");
  test::TempDir dir;
  const std::vector<std::string> sentences = {"the unaffable gentleman walked home.",
                                              "she considered the embroidery carefully."};
  const std::string prefix = dir / "wp";
  {
    data::IndexedDatasetBuilder builder(prefix + ".bin", data::IndexDType::uint16);
    for (const auto& s : sentences) builder.add_item(tok.tokenize(s));
    builder.end_document();
    builder.finalize(prefix + ".idx");
  }
  auto indexed = std::make_shared<const data::IndexedDataset>(prefix);
  data::T5DatasetConfig c = config(64, 32, 40, 9);
  c.short_seq_prob = 0;
  c.mask_prob = 0.3;  // more spans in a short text
  c.pad = tok.pad();
  c.bos = tok.bos();
  c.eos = tok.eos();
  c.sentinels = tok.additional_special_token_ids();
  c.continuation.resize(static_cast<size_t>(tok.vocab_size()));
  for (int64_t id = 0; id < tok.vocab_size(); ++id)
    c.continuation[static_cast<size_t>(id)] = tok.id_to_token(static_cast<int32_t>(id)).starts_with("##");
  T5Dataset d(indexed, 0, 1, c, "wp");
  int whole_words = 0;
  for (int64_t i = 0; i < 40; ++i) {
    const auto s = test::read_t5(d, i);
    const auto layout = test::check_t5_layout(s, c.sentinels, c.pad, c.bos, c.eos);
    EXPECT_EQ(tok.detokenize(layout.text), sentences[0] + " " + sentences[1]);
    // The encoder text reads with <extra_id_k> in place of the spans.
    const std::string encoder = tok.detokenize(std::span<const int32_t>(s.tokens.data(), static_cast<size_t>(layout.encoder_length)));
    EXPECT_NE(encoder.find("<extra_id_0>"), std::string::npos) << encoder;
    for (const auto& span : layout.spans) {
      EXPECT_FALSE(tok.id_to_token(span.front()).starts_with("##")) << "a span starts a word";
      whole_words += span.size() > 1 && tok.id_to_token(span.back()).starts_with("##");
    }
    // A span ends a word: the encoder token after a sentinel never continues a word.
    for (int64_t j = 0; j + 1 < layout.encoder_length; ++j)
      if (s.tokens[static_cast<size_t>(j)] >= tok.additional_special_token_ids()[0]) {
        EXPECT_FALSE(tok.id_to_token(s.tokens[static_cast<size_t>(j + 1)]).starts_with("##"));
      }
  }
  EXPECT_GT(whole_words, 0);
}

}  // namespace
}  // namespace tessera
