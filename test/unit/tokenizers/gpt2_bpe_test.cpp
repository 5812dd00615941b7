// GPT2BPETokenizer against the shared GPT-2 test vectors, plus edge cases: empty and whitespace
// text, emoji, CJK, contractions, numbers, long words (scan vs heap merges), threads, decoding.
#include <gtest/gtest.h>

#include <unistd.h>

#include <fstream>
#include <random>
#include <thread>

#include "tessera/core/error.h"
#include "tessera/data/tokenizer.h"
#include "tessera/data/tokenizer_gpt2_bpe.h"
#include "tessera/data/tokenizer_gpt2_pretokenize.h"
#include "shared_fixture.h"
#include "tokenizer_test_paths.h"

namespace tessera::data {
namespace {

using Ids = std::vector<int32_t>;

const GPT2BPETokenizer& gpt2() {
  static const GPT2BPETokenizer tokenizer((test::gpt2_dir() / "vocab.json").string(),
                                          (test::gpt2_dir() / "merges.txt").string());
  return tokenizer;
}

TEST(Gpt2Bpe, PassesEverySharedTestVector) {
  const auto path = test::vectors_dir() / "gpt2" / "test_vectors.json";
  TESSERA_REQUIRE_SHARED_FILE(path);
  const auto vectors = nlohmann::json::parse(test::read_text(path));
  ASSERT_GE(vectors["cases"].size(), 58u);
  for (const auto& item : vectors["cases"]) {
    const std::string text = item["text"].get<std::string>();
    ASSERT_EQ(test::hex_to_bytes(item["utf8_hex"].get<std::string>()), text);
    const Ids expected = item["ids"].get<Ids>();
    EXPECT_EQ(gpt2().tokenize(text), expected) << "text: " << item["utf8_hex"];
    EXPECT_EQ(gpt2().detokenize(expected), text) << "text: " << item["utf8_hex"];
  }
}

TEST(Gpt2Bpe, SpecialIdsAndSizes) {
  EXPECT_EQ(gpt2().vocab_size(), 50257);
  EXPECT_EQ(gpt2().eod(), 50256);
  EXPECT_EQ(gpt2().type_name(), "GPT2BPETokenizer");
  EXPECT_EQ(gpt2().token_to_id("<|endoftext|>"), 50256);
  EXPECT_EQ(gpt2().token_to_id("\xC4\xA0the"), 262);  // "Ġthe"
  EXPECT_EQ(gpt2().token_to_id("not-a-token-at-all"), -1);
  // In-text "<|endoftext|>" is ordinary text (Megatron appends eod separately).
  EXPECT_NE(gpt2().tokenize("<|endoftext|>"), Ids{50256});
}

TEST(Gpt2Bpe, EmptyAndWhitespaceOnly) {
  EXPECT_TRUE(gpt2().tokenize("").empty());
  EXPECT_EQ(gpt2().tokenize(" "), Ids{220});
  EXPECT_EQ(gpt2().tokenize("\n"), Ids{198});
  EXPECT_EQ(gpt2().tokenize("   "), (Ids{220, 220, 220}));
  for (const std::string text : {" ", "  ", "\t\t", " \n \n", "\r\n\r\n", "\xC2\xA0 \xE3\x80\x80"}) {
    const Ids ids = gpt2().tokenize(text);
    EXPECT_FALSE(ids.empty());
    EXPECT_EQ(gpt2().detokenize(ids), text);
  }
}

// Ids from the shared reference_bpe.py (Megatron's algorithm, stdlib only).
TEST(Gpt2Bpe, MatchesReferenceOnExtraCases) {
  EXPECT_EQ(gpt2().tokenize("I'll've they'RE 123,456.78 x"),
            (Ids{40, 1183, 1053, 484, 6, 2200, 17031, 11, 29228, 13, 3695, 2124}));
  EXPECT_EQ(gpt2().tokenize("\xE2\x80\xA8" "a\xE3\x80\x80" "b\xC2\x85" "c"),  // U+2028, U+3000, U+0085
            (Ids{447, 101, 64, 5099, 222, 65, 126, 227, 66}));
  EXPECT_EQ(gpt2().tokenize("\xC2\xA0\xC2\xA0\n b"), (Ids{4603, 198, 275}));
  EXPECT_EQ(gpt2().tokenize("e\xCC\x81"), (Ids{68, 136, 223}));  // e + combining acute (Mn: "other")
  const Ids greek = gpt2().tokenize("\xC3\x9Cn\xC3\xAF" "c\xC3\xB6" "d\xC3\xA9 na\xC3\xAFve");
  EXPECT_EQ(Ids(greek.begin(), greek.begin() + 9), (Ids{127, 250, 77, 26884, 66, 9101, 67, 2634, 41492}));
}

TEST(Gpt2Bpe, PretokenizerFollowsTheRegexAlternatives) {
  using Pieces = std::vector<std::string_view>;
  EXPECT_EQ(gpt2_pretokenize("I'm can't they're"), (Pieces{"I", "'m", " can", "'t", " they", "'re"}));
  EXPECT_EQ(gpt2_pretokenize("I'M"), (Pieces{"I", "'", "M"}));  // contractions are case-sensitive
  EXPECT_EQ(gpt2_pretokenize("?'d"), (Pieces{"?'", "d"}));      // a run of "other" swallows the quote
  EXPECT_EQ(gpt2_pretokenize("a  \n  b"), (Pieces{"a", "  \n ", " b"}));
  EXPECT_EQ(gpt2_pretokenize("x   "), (Pieces{"x", "   "}));
  EXPECT_EQ(gpt2_pretokenize("\t\tb"), (Pieces{"\t", "\t", "b"}));
  EXPECT_EQ(gpt2_pretokenize("abc123 456"), (Pieces{"abc", "123", " 456"}));
  EXPECT_EQ(gpt2_pretokenize("\xE2\x85\xA0\xE2\x85\xA1x"), (Pieces{"\xE2\x85\xA0\xE2\x85\xA1", "x"}));  // Nl
  EXPECT_EQ(gpt2_pretokenize("\xE7\x94\x9F\xE6\xB4\xBB!"), (Pieces{"\xE7\x94\x9F\xE6\xB4\xBB", "!"}));
  EXPECT_EQ(gpt2_pretokenize(" \xF0\x9F\x8C\x8D\xF0\x9F\xA6\x99 ok"), (Pieces{" \xF0\x9F\x8C\x8D\xF0\x9F\xA6\x99", " ok"}));
  EXPECT_EQ(gpt2_pretokenize("a\x1c" "b"), (Pieces{"a", "\x1c", "b"}));  // U+001C is not \s in `regex`
}

TEST(Gpt2Bpe, EmojiCjkAndNumbersRoundTrip) {
  for (const std::string text :
       {"Hello \xF0\x9F\x8C\x8D World \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7",
        "\xE7\x94\x9F\xE6\xB4\xBB\xE7\x9A\x84\xE7\x9C\x9F\xE8\xB0\x9B\xE6\x98\xAF \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E",
        "3.14159 2,718 1e-9 0x1F -42 \xD9\xA3\xD9\xA4 \xE2\x85\xAB", "na\xC3\xAFve caf\xC3\xA9 \xC3\x85ngstr\xC3\xB6m"}) {
    const Ids ids = gpt2().tokenize(text);
    EXPECT_FALSE(ids.empty());
    EXPECT_EQ(gpt2().detokenize(ids), text);
  }
  EXPECT_EQ(gpt2().tokenize("\xF0\x9F\xA6\x99"), (Ids{8582, 99, 247}));
}

TEST(Gpt2Bpe, InvalidUtf8KeepsItsBytesAndDecodesWithReplacement) {
  const std::string bad = "ab\xFF\xFE" "cd\xE2\x82";
  const Ids ids = gpt2().tokenize(bad);
  std::string bytes;
  for (const int32_t id : ids) bytes += gpt2().id_to_bytes(id);
  EXPECT_EQ(bytes, bad);
  // Python: b"ab\xff\xfecd\xe2\x82".decode("utf-8", "replace") == "ab\ufffd\ufffdcd\ufffd"
  EXPECT_EQ(gpt2().detokenize(ids), "ab\xEF\xBF\xBD\xEF\xBF\xBD" "cd\xEF\xBF\xBD");
  EXPECT_EQ(gpt2().detokenize(Ids{8582}), "\xEF\xBF\xBD");  // the first two bytes of an emoji
  EXPECT_THROW(gpt2().detokenize(Ids{50257}), Error);
  EXPECT_THROW(gpt2().detokenize(Ids{-1}), Error);
}

TEST(Gpt2Bpe, LongWordsMergeTheSameByScanAndByHeap) {
  EXPECT_EQ(gpt2().tokenize(std::string(300, 'x')).size(), 38u);  // reference_bpe.py: 38 ids
  std::string long_word;
  for (int i = 0; i < 10; ++i) long_word += "supercalifragilisticexpialidocious";
  const Ids ids = gpt2().tokenize(long_word);
  EXPECT_EQ(ids.size(), 110u);  // reference_bpe.py
  EXPECT_EQ(Ids(ids.begin(), ids.begin() + 5), (Ids{16668, 9948, 361, 22562, 346}));
  EXPECT_EQ(gpt2().bpe_by_heap(long_word), gpt2().bpe_by_scan(long_word));
  EXPECT_EQ(gpt2().detokenize(ids), long_word);

  std::mt19937 rng(1234);
  const std::string alphabet = "aaeeiioonnrrsstt  00'\xC3\xA9";
  for (int trial = 0; trial < 300; ++trial) {
    std::string word;
    const int length = 1 + static_cast<int>(rng() % 200);
    for (int i = 0; i < length; ++i) word.push_back(alphabet[rng() % alphabet.size()]);
    ASSERT_EQ(gpt2().bpe_by_heap(word), gpt2().bpe_by_scan(word)) << word;
  }
  // Every pre-token of the shared corpus as well.
  const auto corpus = test::shared_dir() / "data" / "corpus" / "austen.txt";
  TESSERA_REQUIRE_SHARED_FILE(corpus);
  const std::string text = test::read_text(corpus).substr(0, 400000);
  for (const std::string_view piece : gpt2_pretokenize(text)) {
    ASSERT_EQ(gpt2().bpe_by_heap(piece), gpt2().bpe_by_scan(piece)) << piece;
  }
}

TEST(Gpt2Bpe, ConcurrentTokenizeMatchesSingleThread) {
  // A fresh tokenizer so the cache starts empty and the threads race to fill it.
  const GPT2BPETokenizer tokenizer((test::gpt2_dir() / "vocab.json").string(),
                                   (test::gpt2_dir() / "merges.txt").string());
  std::vector<std::string> documents;
  std::mt19937 rng(7);
  const std::vector<std::string> words = {"the", " The", " of", " and", " Elizabeth", "'s", " Darcy", ",",
                                          ".", "\n", " 1813", " caf\xC3\xA9", " \xE7\x94\x9F\xE6\xB4\xBB", "  "};
  for (int d = 0; d < 64; ++d) {
    std::string doc;
    for (int w = 0; w < 400; ++w) doc += words[rng() % words.size()] + (rng() % 5 == 0 ? "x" + std::to_string(rng() % 1000) : "");
    documents.push_back(doc);
  }
  std::vector<Ids> expected;
  for (const auto& doc : documents) expected.push_back(gpt2().tokenize(doc));
  std::vector<std::vector<Ids>> results(4, std::vector<Ids>(documents.size()));
  std::vector<std::thread> threads;
  for (size_t t = 0; t < results.size(); ++t) {
    threads.emplace_back([&, t] {
      for (size_t d = 0; d < documents.size(); ++d) results[t][d] = tokenizer.tokenize(documents[(d + t * 16) % documents.size()]);
    });
  }
  for (auto& thread : threads) thread.join();
  for (size_t t = 0; t < results.size(); ++t) {
    for (size_t d = 0; d < documents.size(); ++d) {
      ASSERT_EQ(results[t][d], expected[(d + t * 16) % documents.size()]) << "thread " << t << " doc " << d;
    }
  }
  EXPECT_GT(tokenizer.cache_entries(), 0u);
}

TEST(Gpt2Bpe, MalformedFilesAreConfigErrors) {
  const auto dir = std::filesystem::temp_directory_path() / ("tessera_gpt2_bad_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto vocab = (test::gpt2_dir() / "vocab.json").string();
  const auto merges = (test::gpt2_dir() / "merges.txt").string();
  {
    std::ofstream(dir / "bad.json") << "{\"a\": 1,";
    std::ofstream(dir / "noeod.json") << "{\"a\": 0, \"b\": 1}";
    std::ofstream(dir / "bad_merges.txt") << "#version: 0.2\na b c\n";
  }
  EXPECT_THROW(GPT2BPETokenizer((dir / "bad.json").string(), merges), ConfigError);
  EXPECT_THROW(GPT2BPETokenizer((dir / "noeod.json").string(), merges), ConfigError);
  try {
    GPT2BPETokenizer tokenizer(vocab, (dir / "bad_merges.txt").string());
    ADD_FAILURE() << "a three-field merge line was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("line 2"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera::data

namespace tessera::data {
namespace {

// Two tokenizers sharing a second-level cache (as tessera-preprocess's workers do) give exactly
// the ids of an unshared tokenizer, and the second one is served from what the first merged.
TEST(Gpt2Bpe, SharedSecondLevelCacheGivesTheSameIds) {
  const std::string vocab = (test::gpt2_dir() / "vocab.json").string();
  const std::string merges = (test::gpt2_dir() / "merges.txt").string();
  GPT2BPETokenizer first(vocab, merges), second(vocab, merges);
  auto shared = GPT2BPETokenizer::make_shared_cache();
  first.share_cache(shared);
  second.share_cache(shared);
  const std::string text = "It is a truth universally acknowledged, that a single man in possession of a good "
                           "fortune, must be in want of a wife. Naïve café-goers weren't 2024's crowd.";
  const auto expected = gpt2().tokenize(text);
  EXPECT_EQ(first.tokenize(text), expected);
  EXPECT_GT(shared->size(), 0u);
  const size_t shared_entries = shared->size();
  EXPECT_EQ(second.tokenize(text), expected);
  EXPECT_EQ(shared->size(), shared_entries);  // nothing new to merge: every pre-token came from the shared level
  EXPECT_GT(second.cache_entries(), 0u);      // and was copied into the second tokenizer's own cache
}

}  // namespace
}  // namespace tessera::data
