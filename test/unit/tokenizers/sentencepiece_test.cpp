// SentencePieceTokenizer (through libtessera_sentencepiece.so): share/tokenizers/t5-austen/
// spiece.model, a 1000-piece unigram model trained with spm_train on the bundled Austen corpus with
// T5's special ids (pad 0, eos 1, unk 2, no bos). The expected ids were derived independently of
// libsentencepiece by test/tools/spm_unigram_reference.py (a hand-written protobuf reader and
// unigram Viterbi) and agree with spm_encode; HF's T5Tokenizer and T5TokenizerFast (transformers 5.17)
// give these ids then </s> (1): test/tools/hf_t5_tokenizer_check.py, run on the GPU machine 2026-12-02.
// Sentinels follow HF T5 (<extra_id_0> is the last id); detokenize inverts tokenize.
#include <gtest/gtest.h>

#include "tessera/core/error.h"
#include "tessera/data/tokenizer_sentencepiece.h"
#include "tokenizers/tokenizer_test_paths.h"

namespace tessera::data {
namespace {

std::string model_path() { return (test::source_dir() / "share/tokenizers/t5-austen/spiece.model").string(); }

#define SKIP_UNDER_ASAN()                                                                         \
  if (!SentencePieceTokenizer::available_in_this_build())                                         \
  GTEST_SKIP() << "AddressSanitizer build: the SentencePiece shim needs RTLD_DEEPBIND"

TEST(SentencePieceTokenizer, EncodesAsTheReferenceAndHfT5) {
  SKIP_UNDER_ASAN();
  SentencePieceTokenizer tok(model_path(), 100);
  const std::string text =
      "It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a "
      "wife.";
  const std::vector<int32_t> expected = {208, 52, 11, 832, 125, 158, 24, 4,  72, 41, 871, 21, 3,   35,
                                         11,  45, 13, 88,  238, 15,  83, 18, 4,  95, 4,   4,  120, 9,
                                         11,  179, 739, 3, 117, 23, 15, 310, 9,  11, 630, 6};
  EXPECT_EQ(tok.tokenize(text), expected);
  // Whitespace runs collapse (nmt_nfkc), as in HF's T5Tokenizer.
  EXPECT_EQ(tok.tokenize("Elizabeth  Bennet smiled;   Mr. Darcy did not."),
            (std::vector<int32_t>{301, 538, 590, 21, 22, 81, 6, 451, 177, 27, 6}));
  EXPECT_EQ(tok.detokenize(expected), text);
  EXPECT_EQ(tok.pad(), 0);
  EXPECT_EQ(tok.eos(), 1);
  EXPECT_EQ(tok.unk(), 2);
  EXPECT_EQ(tok.bos(), -1);
  EXPECT_EQ(tok.decoder_start(), 0);  // HF T5: the decoder starts with <pad>
  EXPECT_EQ(tok.eod(), 1);
  EXPECT_EQ(tok.type_name(), "SentencePieceTokenizer");
}

TEST(SentencePieceTokenizer, SentinelsFollowHfT5) {
  SKIP_UNDER_ASAN();
  SentencePieceTokenizer tok(model_path(), 100);
  ASSERT_EQ(tok.vocab_size(), 1100);
  const auto& extra = tok.additional_special_token_ids();
  ASSERT_EQ(extra.size(), 100u);
  EXPECT_EQ(extra[0], 1099);
  EXPECT_EQ(extra[99], 1000);
  EXPECT_EQ(tok.id_to_token(1099), "<extra_id_0>");
  EXPECT_EQ(tok.token_to_id("<extra_id_7>"), 1092);
  // A sentinel in the text is its id; the text around it is encoded apart (HF's T5Tokenizer).
  EXPECT_EQ(tok.tokenize("It is a truth <extra_id_0> acknowledged."),
            (std::vector<int32_t>{208, 52, 11, 832, 1099, 871, 21, 6}));
  EXPECT_EQ(tok.tokenize("<extra_id_1><extra_id_0>"), (std::vector<int32_t>{1098, 1099}));
  SentencePieceTokenizer no_sentinels(model_path());
  const auto as_text = no_sentinels.tokenize("<extra_id_0>");  // no sentinels: plain text
  EXPECT_GT(as_text.size(), 1u);
  for (int32_t id : as_text) EXPECT_LT(id, 1000);
  const std::vector<int32_t> ids = {1099, 208, 52, 1098};
  EXPECT_EQ(tok.detokenize(ids), "<extra_id_0>It is<extra_id_1>");
  EXPECT_TRUE(tok.continues_word(21));    // "d"
  EXPECT_FALSE(tok.continues_word(208));  // "▁It"
  EXPECT_FALSE(tok.continues_word(0));    // <pad>
  EXPECT_THROW(tok.id_to_token(1100), Error);
  SentencePieceTokenizer plain(model_path());
  EXPECT_EQ(plain.vocab_size(), 1000);
}

TEST(SentencePieceTokenizer, FactoryAndErrors) {
  SKIP_UNDER_ASAN();
  TokenizerOptions options;
  options.type = "SentencePieceTokenizer";
  options.tokenizer_model = model_path();
  options.vocab_extra_ids = 10;
  auto tok = make_tokenizer(options);
  EXPECT_EQ(tok->vocab_size(), 1010);
  options.tokenizer_model = "";
  EXPECT_THROW(make_tokenizer(options), ConfigError);
  EXPECT_THROW(SentencePieceTokenizer("/nonexistent/spiece.model"), ConfigError);
  try {  // a file that is not a model: the error names it
    SentencePieceTokenizer bad((test::source_dir() / "share/tokenizers/README.md").string());
    ADD_FAILURE() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("README.md"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera::data
