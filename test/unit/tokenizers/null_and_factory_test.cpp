// NullTokenizer (Megatron semantics: eod = --vocab-size, vocab_size() = --vocab-size + 1) and the
// make_tokenizer factory: every type it knows, and its ConfigErrors for bad types and files.
#include <gtest/gtest.h>

#include "tessera/core/error.h"
#include "tessera/data/tokenizer.h"
#include "tessera/data/tokenizer_null.h"
#include "tokenizer_test_paths.h"

namespace tessera::data {
namespace {

using Ids = std::vector<int32_t>;

std::string config_error_of(const TokenizerOptions& options) {
  try {
    make_tokenizer(options);
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no ConfigError for type '" << options.type << "'";
  return "";
}

TEST(NullTokenizer, ParsesAndPrintsIds) {
  const NullTokenizer tokenizer(1000);
  EXPECT_EQ(tokenizer.vocab_size(), 1001);
  EXPECT_EQ(tokenizer.eod(), 1000);
  EXPECT_EQ(tokenizer.eod(), tokenizer.vocab_size() - 1);
  EXPECT_EQ(tokenizer.tokenize("12 7 3"), (Ids{12, 7, 3}));
  EXPECT_EQ(tokenizer.tokenize("  0\t999\n1000 "), (Ids{0, 999, 1000}));
  EXPECT_TRUE(tokenizer.tokenize("").empty());
  EXPECT_TRUE(tokenizer.tokenize("   ").empty());
  EXPECT_EQ(tokenizer.detokenize(Ids{12, 7, 3}), "12 7 3");
  EXPECT_EQ(tokenizer.tokenize(tokenizer.detokenize(Ids{5, 0, 1000})), (Ids{5, 0, 1000}));
  EXPECT_THROW(tokenizer.tokenize("12 x7"), Error);
  EXPECT_THROW(tokenizer.tokenize("1001"), Error);
  EXPECT_THROW(tokenizer.tokenize("-1"), Error);
  EXPECT_THROW(NullTokenizer(0), ConfigError);
}

TEST(MakeTokenizer, BuildsEveryType) {
  const auto gpt2 = make_tokenizer({"GPT2BPETokenizer", (test::gpt2_dir() / "vocab.json").string(),
                                    (test::gpt2_dir() / "merges.txt").string(), 0});
  EXPECT_EQ(gpt2->type_name(), "GPT2BPETokenizer");
  EXPECT_EQ(gpt2->tokenize("Hello world"), (Ids{15496, 995}));
  const auto bert = make_tokenizer({"BertWordPieceLowerCase", (test::bert_dir() / "vocab.txt").string(), "", 0});
  EXPECT_EQ(bert->type_name(), "BertWordPieceLowerCase");
  EXPECT_EQ(bert->tokenize("How are you doing?"), (Ids{2129, 2024, 2017, 2725, 1029}));
  const auto bert_cased = make_tokenizer({"BertWordPieceCase", (test::bert_dir() / "vocab.txt").string(), "", 0});
  EXPECT_EQ(bert_cased->type_name(), "BertWordPieceCase");
  const auto null = make_tokenizer({"NullTokenizer", "", "", 50});
  EXPECT_EQ(null->eod(), 50);
  EXPECT_EQ(null->vocab_size(), 51);
}

TEST(MakeTokenizer, UnknownTypeListsTheAllowedOnes) {
  const std::string message = config_error_of({"TikTokenizer", "", "", 0});  // Megatron's, not Tessera's
  EXPECT_NE(message.find("TikTokenizer"), std::string::npos) << message;
  for (const char* allowed : {"GPT2BPETokenizer", "BertWordPieceLowerCase", "BertWordPieceCase", "SentencePieceTokenizer",
                              "NullTokenizer"}) {
    EXPECT_NE(message.find(allowed), std::string::npos) << message;
  }
}

TEST(MakeTokenizer, MissingFilesNameTheFileAndTheOption) {
  const std::string merges = (test::gpt2_dir() / "merges.txt").string();
  std::string message = config_error_of({"GPT2BPETokenizer", "/nonexistent/vocab.json", merges, 0});
  EXPECT_NE(message.find("/nonexistent/vocab.json"), std::string::npos) << message;
  EXPECT_NE(message.find("--vocab-file"), std::string::npos) << message;
  EXPECT_NE(message.find("data.vocab_file"), std::string::npos) << message;

  message = config_error_of({"GPT2BPETokenizer", (test::gpt2_dir() / "vocab.json").string(), "/nope/merges.txt", 0});
  EXPECT_NE(message.find("/nope/merges.txt"), std::string::npos) << message;
  EXPECT_NE(message.find("--merge-file"), std::string::npos) << message;

  message = config_error_of({"GPT2BPETokenizer", (test::gpt2_dir() / "vocab.json").string(), "", 0});
  EXPECT_NE(message.find("--merge-file"), std::string::npos) << message;

  message = config_error_of({"BertWordPieceCase", "", "", 0});
  EXPECT_NE(message.find("--vocab-file"), std::string::npos) << message;

  message = config_error_of({"NullTokenizer", "", "", 0});
  EXPECT_NE(message.find("--vocab-size"), std::string::npos) << message;
}

}  // namespace
}  // namespace tessera::data
