// The server's request body reader (http_api.h): integers above INT64_MAX are refused instead of
// wrapping to negative values (found while writing test/fuzz/fuzz_http_request.cpp: a stop_token of
// 2^64 - 1 became -1, "no stop token", and the request was accepted).
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tessera/data/tokenizer.h"
#include "tessera/generate/http_api.h"

namespace tessera::generate {
namespace {

class GenerateHttpApi : public ::testing::Test {
 protected:
  void SetUp() override {
    vocab_ = std::filesystem::temp_directory_path() / ("tessera_http_api_" + std::to_string(::getpid()) + ".txt");
    std::ofstream(vocab_) << "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\nworld\n";
    data::TokenizerOptions options;
    options.type = "BertWordPieceLowerCase";
    options.vocab_file = vocab_.string();
    tokenizer_ = data::make_tokenizer(options);
    context_.tokenizer = tokenizer_.get();
    context_.vocab_size = tokenizer_->vocab_size();
    context_.max_length = 32;
    context_.eod = tokenizer_->eod();
  }
  void TearDown() override { std::filesystem::remove(vocab_); }
  std::filesystem::path vocab_;
  std::unique_ptr<data::Tokenizer> tokenizer_;
  ApiContext context_;
};

TEST_F(GenerateHttpApi, AcceptsAValidRequest) {
  const auto r = parse_api_request(R"({"prompts": ["hello world"], "tokens_to_generate": 4, "stop_token": 3})", context_);
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0].size(), 2u);
  EXPECT_EQ(r.max_new_tokens, 4);
  EXPECT_EQ(r.stop_token, 3);
}

TEST_F(GenerateHttpApi, RefusesUnsignedIntegersBeyondInt64) {
  for (const char* key : {"stop_token", "tokens_to_generate", "random_seed", "top_k", "beam_width"}) {
    const std::string body = std::string(R"({"prompts": ["hello"], ")") + key + R"(": 18446744073709551615})";
    try {
      (void)parse_api_request(body, context_);
      ADD_FAILURE() << key << " = 2^64 - 1 was accepted";
    } catch (const ApiError& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace tessera::generate
