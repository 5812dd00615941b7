// BertDataset over a sentence-split indexed dataset: [CLS] A [SEP] B [SEP] with token types and
// padding, A and B whole consecutive sentences of one document (in order, or swapped with
// is_random), |A| + |B| within the entry's target, samples deterministic per seed, the map over
// documents of at least two sentences, whole-word masking proportions, and a round trip of one
// sample of a WordPiece-tokenized text through the tokenizer.
#include <gtest/gtest.h>

#include <map>

#include "data/data_test_util.h"
#include "tessera/core/error.h"
#include "tessera/data/bert_dataset.h"
#include "tessera/data/indexed_dataset_builder.h"
#include "tessera/data/tokenizer_bert_wordpiece.h"
#include "test_paths.h"

namespace tessera {
namespace {

using data::BertDataset;

constexpr int32_t kCls = 1, kSep = 2, kMask = 3;

// Document d, sentence k: ids 100 + 10 d + k, (k % 4) + 2 of them. Document 3 has one sentence.
std::string write_sentences(const std::string& dir) {
  const std::string prefix = dir + "/sentences";
  data::IndexedDatasetBuilder builder(prefix + ".bin", data::IndexDType::int32);
  for (int d = 0; d < 8; ++d) {
    const int sentences = d == 3 ? 1 : 3 + d % 3;
    for (int k = 0; k < sentences; ++k) {
      std::vector<int32_t> sentence(static_cast<size_t>(k % 4 + 2), 100 + 10 * d + k);
      builder.add_item(sentence);
    }
    builder.end_document();
  }
  builder.finalize(prefix + ".idx");
  return prefix;
}

data::BertDatasetConfig config(int64_t seq, int64_t samples, uint64_t seed) {
  data::BertDatasetConfig c;
  c.seq_length = seq;
  c.seed = seed;
  c.num_samples = samples;
  c.cls = kCls;
  c.sep = kSep;
  c.pad = 0;
  c.mask = kMask;
  c.vocab_size = 200;
  return c;
}

struct Sample {
  std::vector<int32_t> tokens, labels, types;
  std::vector<float> mask;
  std::vector<uint8_t> padding;
  int32_t is_random = 0;
};
Sample read(const BertDataset& d, int64_t i) {
  const size_t s = static_cast<size_t>(d.seq_length());
  Sample out{std::vector<int32_t>(s), std::vector<int32_t>(s), std::vector<int32_t>(s), std::vector<float>(s),
             std::vector<uint8_t>(s)};
  data::MaskedLmSample view{out.tokens, out.labels, out.types, out.mask, out.padding, 0};
  d.masked_lm_sample(i, view);
  out.is_random = view.is_random;
  return out;
}

TEST(BertDataset, LayoutSentencePairsAndLengths) {
  test::TempDir dir;
  auto indexed = std::make_shared<const data::IndexedDataset>(write_sentences(dir.path().string()));
  const int64_t seq = 16;
  BertDataset d(indexed, 0, 8, config(seq, 200, 5), "test");
  ASSERT_GE(d.num_samples(), 200);
  for (const auto& e : d.sample_map()) {
    EXPECT_GE(e.end_sentence - e.first_sentence, 2);
    EXPECT_GE(e.target, 2);
    EXPECT_LE(e.target, seq - 3);
    EXPECT_FALSE(e.first_sentence >= indexed->document_index(3) && e.first_sentence < indexed->document_index(4))
        << "a one-sentence document gave a sample";
  }
  int swapped = 0;
  for (int64_t i = 0; i < d.num_samples(); ++i) {
    const Sample s = read(d, i);
    const auto& e = d.sample_map()[static_cast<size_t>(i)];
    EXPECT_EQ(s.labels[0], kCls);
    int64_t real = 0;
    while (real < seq && s.padding[static_cast<size_t>(real)]) ++real;
    for (int64_t j = real; j < seq; ++j) EXPECT_EQ(s.tokens[static_cast<size_t>(j)], 0);
    EXPECT_EQ(s.labels[static_cast<size_t>(real - 1)], kSep);
    EXPECT_LE(real - 3, e.target) << "|A| + |B| over the target";
    int64_t sep = 1;
    while (s.labels[static_cast<size_t>(sep)] != kSep) ++sep;
    std::vector<int32_t> a(s.labels.begin() + 1, s.labels.begin() + sep),
        b(s.labels.begin() + sep + 1, s.labels.begin() + real - 1);
    ASSERT_FALSE(a.empty());
    ASSERT_FALSE(b.empty());
    for (int64_t j = 0; j < real; ++j) EXPECT_EQ(s.types[static_cast<size_t>(j)], j > sep ? 1 : 0);
    // Sentence ids: A's all precede B's unless swapped; both from one document.
    const int32_t doc = (a.front() - 100) / 10;
    for (int32_t t : a) EXPECT_EQ((t - 100) / 10, doc);
    for (int32_t t : b) EXPECT_EQ((t - 100) / 10, doc);
    EXPECT_EQ(s.is_random ? a.front() > b.back() : a.back() < b.front(), true) << "sample " << i;
    swapped += s.is_random;
    for (size_t j = 0; j < s.tokens.size(); ++j)
      if (s.mask[j] == 0.0f) EXPECT_EQ(s.labels[j], s.tokens[j]);
  }
  EXPECT_GT(swapped, d.num_samples() / 4);
  EXPECT_LT(swapped, 3 * d.num_samples() / 4);
}

TEST(BertDataset, DeterministicPerSeed) {
  test::TempDir dir;
  auto indexed = std::make_shared<const data::IndexedDataset>(write_sentences(dir.path().string()));
  BertDataset a(indexed, 0, 8, config(16, 50, 5), "a"), b(indexed, 0, 8, config(16, 50, 5), "b"),
      c(indexed, 0, 8, config(16, 50, 6), "c");
  int differ = 0;
  for (int64_t i = 0; i < 20; ++i) {
    const Sample x = read(a, i), y = read(b, i), z = read(c, i);
    EXPECT_EQ(x.tokens, y.tokens);
    EXPECT_EQ(x.labels, y.labels);
    EXPECT_EQ(x.mask, y.mask);
    differ += x.labels != z.labels || x.mask != z.mask;
  }
  EXPECT_GT(differ, 0);
}

TEST(BertDataset, NoTwoSentenceDocumentIsANamedError) {
  test::TempDir dir;
  auto indexed = std::make_shared<const data::IndexedDataset>(write_sentences(dir.path().string()));
  try {
    BertDataset d(indexed, 3, 4, config(16, 10, 5), "one-sentence split");
    ADD_FAILURE() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("one-sentence split"), std::string::npos) << e.what();
  }
}

// A WordPiece-tokenized text of two sentences: the sample's unmasked labels detokenize to it, and
// masking covers whole words ("##" pieces with the piece before them).
TEST(BertDataset, RoundTripThroughTheWordPieceTokenizer) {
  const std::string vocab = (test::shared_dir() / "data/tokenizers/bert-base-uncased/vocab.txt").string();
  data::BertWordPieceTokenizer tok(vocab, true);
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
  data::BertDatasetConfig c = config(64, 30, 9);
  c.short_seq_prob = 0;
  c.cls = tok.cls();
  c.sep = tok.sep();
  c.pad = tok.pad();
  c.mask = tok.mask();
  c.vocab_size = tok.vocab_size();
  c.continuation.resize(static_cast<size_t>(tok.vocab_size()));
  for (int64_t id = 0; id < tok.vocab_size(); ++id)
    c.continuation[static_cast<size_t>(id)] = tok.id_to_token(static_cast<int32_t>(id)).starts_with("##");
  BertDataset d(indexed, 0, 1, c, "wp");
  int whole_words = 0;
  for (int64_t i = 0; i < 30; ++i) {
    // The map holds this one pair again and again (epochs); samples differ in order and masks.
    const Sample s = read(d, i);
    int64_t sep = 1, real = 0;
    while (s.labels[static_cast<size_t>(sep)] != tok.sep()) ++sep;
    while (s.padding[static_cast<size_t>(real)]) ++real;
    const std::string a = tok.detokenize(std::span<const int32_t>(s.labels.data() + 1, static_cast<size_t>(sep - 1)));
    const std::string b = tok.detokenize(
        std::span<const int32_t>(s.labels.data() + sep + 1, static_cast<size_t>(real - sep - 2)));
    EXPECT_EQ(s.is_random ? b : a, sentences[0]);
    EXPECT_EQ(s.is_random ? a : b, sentences[1]);
    // "unaffable" is several pieces: masked together or not at all.
    std::vector<float> piece_masks;
    for (int64_t j = 0; j < real; ++j) {
      const std::string& t = tok.id_to_token(s.labels[static_cast<size_t>(j)]);
      if (t.starts_with("##")) {
        EXPECT_EQ(s.mask[static_cast<size_t>(j)], s.mask[static_cast<size_t>(j - 1)]) << t;
        whole_words += s.mask[static_cast<size_t>(j)] != 0.0f;
      }
    }
  }
  EXPECT_GT(whole_words, 0);
}

}  // namespace
}  // namespace tessera
