// Measures GPT-2 BPE throughput (MB/s, one thread) on the shared Austen corpus and checks the
// token count the corpus README gives; prints the speed but never asserts on it.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <ctime>

#include "tessera/data/tokenizer_gpt2_bpe.h"
#include "shared_fixture.h"
#include "tokenizer_test_paths.h"

namespace tessera::data {
namespace {

TEST(Gpt2BpeThroughput, AustenCorpusSingleThread) {
  const auto corpus = test::shared_dir() / "data" / "corpus" / "austen.txt";
  TESSERA_REQUIRE_SHARED_FILE(corpus);
  const std::string text = test::read_text(corpus);
  const GPT2BPETokenizer tokenizer((test::gpt2_dir() / "vocab.json").string(),
                                   (test::gpt2_dir() / "merges.txt").string());
  // Line by line, as tessera-preprocess sees documents (one tokenize() call per document).
  std::vector<std::string_view> lines;
  for (size_t begin = 0; begin < text.size();) {
    size_t end = text.find('\n', begin);
    end = end == std::string::npos ? text.size() : end + 1;
    lines.push_back(std::string_view(text).substr(begin, end - begin));
    begin = end;
  }
  for (int pass = 0; pass < 2; ++pass) {  // pass 0: cold cache, pass 1: warm cache
    size_t tokens = 0;
    const auto start = std::chrono::steady_clock::now();
    const std::clock_t cpu_start = std::clock();
    for (const std::string_view line : lines) tokens += tokenizer.tokenize(line).size();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double cpu_seconds = static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC;
    // Wall time suffers when the machine is shared; CPU time is what one core delivers.
    std::printf("[ throughput ] GPT-2 BPE, %s cache, line by line: %.1f MB/s wall, %.1f MB/s CPU "
                "(%zu bytes, %zu tokens)\n", pass == 0 ? "cold" : "warm", text.size() / seconds / 1e6,
                text.size() / cpu_seconds / 1e6, text.size(), tokens);
    // Splitting at '\n' cannot change GPT-2's pre-tokens except around runs of blank lines, so
    // compare the count with the whole-text tokenization below instead of the README figure.
    EXPECT_GT(tokens, 900000u);
  }
  const auto start = std::chrono::steady_clock::now();
  const size_t whole = tokenizer.tokenize(text).size();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("[ throughput ] GPT-2 BPE, warm cache, whole text: %.1f MB/s\n", text.size() / seconds / 1e6);
  EXPECT_EQ(whole, 993231u);  // shared/data/README.md: 993,231 GPT-2 tokens for austen.txt
}

}  // namespace
}  // namespace tessera::data
