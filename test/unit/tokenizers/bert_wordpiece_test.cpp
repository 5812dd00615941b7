// BertWordPieceLowerCase / BertWordPieceCase against the shared bert-base-uncased test vectors,
// plus edge cases: accents, final sigma, CJK, control characters, long words, special ids, decoding.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "tessera/core/error.h"
#include "tessera/data/tokenizer_bert_wordpiece.h"
#include "shared_fixture.h"
#include "tokenizer_test_paths.h"

namespace tessera::data {
namespace {

using Ids = std::vector<int32_t>;
using Words = std::vector<std::string>;

const BertWordPieceTokenizer& uncased() {
  static const BertWordPieceTokenizer tokenizer((test::bert_dir() / "vocab.txt").string(), true);
  return tokenizer;
}
const BertWordPieceTokenizer& cased() {
  static const BertWordPieceTokenizer tokenizer((test::bert_dir() / "vocab.txt").string(), false);
  return tokenizer;
}

TEST(BertWordPiece, PassesEverySharedTestVector) {
  const auto path = test::vectors_dir() / "bert-base-uncased" / "test_vectors.json";
  TESSERA_REQUIRE_SHARED_FILE(path);
  const auto vectors = nlohmann::json::parse(test::read_text(path));
  ASSERT_GE(vectors["cases"].size(), 16u);
  for (const auto& item : vectors["cases"]) {
    const std::string text = item["text"].get<std::string>();
    ASSERT_EQ(test::hex_to_bytes(item["utf8_hex"].get<std::string>()), text);
    EXPECT_EQ(uncased().tokenize(text), item["ids"].get<Ids>()) << "text: " << item["utf8_hex"];
  }
}

TEST(BertWordPiece, SpecialIdsFollowMegatron) {
  EXPECT_EQ(uncased().pad(), 0);
  EXPECT_EQ(uncased().unk(), 100);
  EXPECT_EQ(uncased().cls(), 101);
  EXPECT_EQ(uncased().sep(), 102);
  EXPECT_EQ(uncased().mask(), 103);
  // _BertWordPieceTokenizer adds [BOS] and [EOS] after the 30522 vocab.txt entries; eod is eos.
  EXPECT_EQ(uncased().bos(), 30522);
  EXPECT_EQ(uncased().eos(), 30523);
  EXPECT_EQ(uncased().eod(), 30523);
  EXPECT_EQ(uncased().vocab_size(), 30524);
  EXPECT_EQ(uncased().type_name(), "BertWordPieceLowerCase");
  EXPECT_EQ(cased().type_name(), "BertWordPieceCase");
  const BertWordPieceTokenizer t5((test::bert_dir() / "vocab.txt").string(), true, 100);
  EXPECT_EQ(t5.vocab_size(), 30624);
  ASSERT_EQ(t5.additional_special_token_ids().size(), 100u);
  EXPECT_EQ(t5.additional_special_token_ids().front(), 30524);
  EXPECT_EQ(t5.token_to_id("<extra_id_99>"), 30623);
}

TEST(BertWordPiece, EmptyAndWhitespaceOnly) {
  EXPECT_TRUE(uncased().tokenize("").empty());
  EXPECT_TRUE(uncased().tokenize(" \t\r\n \xC2\xA0\xE3\x80\x80\xE2\x80\xA8").empty());
  EXPECT_TRUE(uncased().tokenize(std::string("\0\x07\xEF\xBF\xBD", 5)).empty());  // NUL, BEL, U+FFFD
}

TEST(BertWordPiece, LowerCaseStripsAccentsAndHandlesFinalSigma) {
  // Ids from the shared wordpiece_ref.py.
  EXPECT_EQ(uncased().basic_tokenize("H\xC3\xA9llo, W\xC3\xB6rld!"), (Words{"hello", ",", "world", "!"}));
  EXPECT_EQ(uncased().tokenize("H\xC3\xA9llo, W\xC3\xB6rld! \xCE\xA3\xCE\x8A\xCE\xA3\xCE\xA5\xCE\xA6\xCE\x9F\xCE\xA3"),
            (Ids{7592, 1010, 2088, 999, 1173, 18199, 29733, 29735, 29736, 15297}));
  // e + U+0301, "é", zero-width space (Cf: dropped), NUL, U+FFFD and BEL between letters.
  static constexpr char kMixed[] = "e\xCC\x81t\xC3\xA9 x\xE2\x80\x8By \0z\xEF\xBF\xBD\x07q";
  EXPECT_EQ(uncased().tokenize(std::string(kMixed, sizeof kMixed - 1)),  // its 20 bytes, the embedded NUL too
            (Ids{3802, 2063, 1060, 2100, 1062, 4160}));
}

TEST(BertWordPiece, CasedKeepsCaseAndAccents) {
  EXPECT_EQ(cased().basic_tokenize("H\xC3\xA9llo, W\xC3\xB6rld!"), (Words{"H\xC3\xA9llo", ",", "W\xC3\xB6rld", "!"}));
  // The uncased vocabulary has no "H": a cased word made of unknown pieces is one [UNK].
  EXPECT_EQ(cased().tokenize("Hello hello"), (Ids{100, 7592}));
}

TEST(BertWordPiece, CjkPunctuationAndContractions) {
  EXPECT_EQ(uncased().basic_tokenize("\xE4\xB8\xAD\xE6\x96\x87 and \xE6\x97\xA5\xE6\x9C\xAC"),
            (Words{"\xE4\xB8\xAD", "\xE6\x96\x87", "and", "\xE6\x97\xA5", "\xE6\x9C\xAC"}));
  EXPECT_EQ(uncased().basic_tokenize("don't stop-believing $5^2`~"),
            (Words{"don", "'", "t", "stop", "-", "believing", "$", "5", "^", "2", "`", "~"}));
  EXPECT_EQ(uncased().tokenize("don't stop-believing"), (Ids{2123, 1005, 1056, 2644, 1011, 8929}));
  EXPECT_EQ(uncased().tokenize("unaffable"), (Ids{14477, 20961, 3468}));
}

TEST(BertWordPiece, LongWordsBecomeUnkPastTheLimit) {
  const std::string at_limit(BertWordPieceTokenizer::kMaxCharsPerWord, 'a');
  const Ids ids = uncased().tokenize(at_limit);
  ASSERT_FALSE(ids.empty());
  EXPECT_NE(ids, Ids{uncased().unk()});
  EXPECT_EQ(uncased().detokenize(ids), at_limit);
  EXPECT_EQ(uncased().tokenize(at_limit + "a"), Ids{uncased().unk()});
  // The limit counts code points, not bytes: 150 "α" (two bytes each) are a 150-character word.
  std::string greek;
  for (int i = 0; i < 150; ++i) greek += "\xCE\xB1";
  EXPECT_EQ(cased().tokenize(greek).size(), 150u);  // "α" then 149 "##α"
  EXPECT_EQ(cased().tokenize(greek).front(), cased().token_to_id("\xCE\xB1"));
}

TEST(BertWordPiece, DetokenizeFollowsMegatron) {
  EXPECT_EQ(uncased().detokenize(uncased().tokenize("UNwant\xC3\xA9" "d,running")), "unwanted, running");
  EXPECT_EQ(uncased().detokenize(uncased().tokenize("How are you doing?")), "how are you doing?");
  EXPECT_EQ(uncased().detokenize(Ids{101, 7592, 102}), "[CLS] hello [SEP]");
  EXPECT_THROW(uncased().detokenize(Ids{30524}), Error);
}

TEST(BertWordPiece, MalformedVocabIsConfigError) {
  const auto dir = std::filesystem::temp_directory_path() / ("tessera_bert_bad_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  { std::ofstream(dir / "vocab.txt") << "[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n"; }  // no [MASK]
  try {
    BertWordPieceTokenizer tokenizer((dir / "vocab.txt").string(), true);
    ADD_FAILURE() << "a vocabulary without [MASK] was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("[MASK]"), std::string::npos) << e.what();
  }
  { std::ofstream(dir / "vocab.txt") << "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\nhello\n"; }
  EXPECT_THROW(BertWordPieceTokenizer((dir / "vocab.txt").string(), true), ConfigError);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tessera::data
