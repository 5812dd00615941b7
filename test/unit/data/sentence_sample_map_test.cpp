// The sentence sample map shared by BERT and T5 (sentence_sample_map.h): BERT's samples are
// bitwise those of BertDataset before the map was factored out (the hash below was computed with
// the pre-refactoring bert_dataset.cpp on the same data), min_sentences 1 admits one-sentence
// documents, entries are whole runs of sentences of one document, the map is deterministic.
#include <gtest/gtest.h>

#include "data/data_test_util.h"
#include "tessera/core/error.h"
#include "tessera/data/bert_dataset.h"
#include "tessera/data/indexed_dataset_builder.h"
#include "tessera/data/sentence_sample_map.h"

namespace tessera {
namespace {

// 300 documents of 1-9 sentences of 1-23 tokens.
std::string write_corpus(const std::string& dir) {
  const std::string prefix = dir + "/sent";
  data::IndexedDatasetBuilder builder(prefix + ".bin", data::IndexDType::int32);
  for (int d = 0; d < 300; ++d) {
    const int sentences = 1 + (d * 7) % 9;
    for (int k = 0; k < sentences; ++k) {
      std::vector<int32_t> s(static_cast<size_t>((d * 13 + k * 5) % 23 + 1));
      for (size_t j = 0; j < s.size(); ++j) s[j] = 10 + static_cast<int32_t>((d * 31 + k * 17 + j * 3) % 180);
      builder.add_item(s);
    }
    builder.end_document();
  }
  builder.finalize(prefix + ".idx");
  return prefix;
}

TEST(SentenceSampleMap, BertSamplesAreBitwiseThoseBeforeTheRefactoring) {
  test::TempDir dir;
  auto indexed = std::make_shared<const data::IndexedDataset>(write_corpus(dir.path().string()));
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the maps and every sample
  auto mix = [&](const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  };
  for (uint64_t seed : {1234ull, 7ull}) {
    for (int64_t seq : {32, 128}) {
      data::BertDatasetConfig c;
      c.seq_length = seq;
      c.seed = seed;
      c.num_samples = 5000;
      c.vocab_size = 200;
      c.continuation.assign(200, 0);
      for (int i = 0; i < 200; i += 7) c.continuation[static_cast<size_t>(i)] = 1;
      data::BertDataset d(indexed, 0, 300, c, "x");
      for (const auto& e : d.sample_map()) mix(&e, sizeof(e));
      const size_t s = static_cast<size_t>(seq);
      std::vector<int32_t> t(s), l(s), ty(s);
      std::vector<float> m(s);
      std::vector<uint8_t> p(s);
      for (int64_t i = 0; i < d.num_samples(); ++i) {
        data::MaskedLmSample v{t, l, ty, m, p, 0};
        d.masked_lm_sample(i, v);
        mix(t.data(), s * 4), mix(l.data(), s * 4), mix(ty.data(), s * 4), mix(m.data(), s * 4), mix(p.data(), s);
        mix(&v.is_random, 4);
      }
    }
  }
  EXPECT_EQ(h, 0xf9ffd2564f16a9b5ull);
}

TEST(SentenceSampleMap, EntriesAreRunsOfOneDocumentsSentences) {
  test::TempDir dir;
  auto indexed = std::make_shared<const data::IndexedDataset>(write_corpus(dir.path().string()));
  for (int64_t min_sentences : {1, 2}) {
    data::SentenceSampleMapOptions o;
    o.max_length = 40;
    o.min_sentences = min_sentences;
    o.num_samples = 2000;
    o.seed = 3;
    o.stream = 17;
    const auto map = data::build_sentence_sample_map(*indexed, 0, 300, o, "corpus");
    EXPECT_EQ(map, data::build_sentence_sample_map(*indexed, 0, 300, o, "corpus"));
    ASSERT_GE(map.size(), 2000u);
    bool one_sentence = false;
    for (const auto& e : map) {
      const int64_t n = e.end_sentence - e.first_sentence;
      EXPECT_GE(n, min_sentences);
      one_sentence = one_sentence || n == 1;
      EXPECT_GE(e.target, 2);
      EXPECT_LE(e.target, 40);
      int64_t doc = 0;
      while (indexed->document_index(doc + 1) <= e.first_sentence) ++doc;
      EXPECT_LE(e.end_sentence, indexed->document_index(doc + 1)) << "an entry stays in its document";
    }
    EXPECT_EQ(one_sentence, min_sentences == 1);
  }
}

}  // namespace
}  // namespace tessera
