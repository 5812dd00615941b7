// Issue 23's tessera-preprocess items: an input that is a folder (item 15) and more workers than
// documents (item 12) end cleanly and quickly.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>

#include "data_test_util.h"
#include "test_paths.h"

using tessera::test::run_command;
using tessera::test::TempDir;

namespace {

std::string preprocess() { return (tessera::test::bin_dir() / "tessera-preprocess").string(); }
std::string gpt2_flags() {
  auto dir = tessera::test::shared_dir() / "data/tokenizers/gpt2";
  return " --tokenizer-type GPT2BPETokenizer --vocab-file " + (dir / "vocab.json").string() + " --merge-file " +
         (dir / "merges.txt").string();
}

TEST(PreprocessBadInput, Item15InputThatIsAFolderIsAConfigErrorNamingIt) {
  TempDir dir;
  auto r = run_command(preprocess() + " --input " + dir.path().string() + " --output-prefix " +
                       (dir.path() / "out").string() + gpt2_flags());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--input " + dir.path().string()), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("mmap"), std::string::npos) << r.output;
}

TEST(PreprocessBadInput, Item12ThousandWorkersOnFortyDocumentsFinishQuickly) {
  TempDir dir;
  {
    std::ofstream jsonl(dir.path() / "in.jsonl");
    for (int i = 0; i < 40; ++i) jsonl << "{\"text\": \"document number " << i << " of a small corpus\"}\n";
  }
  auto start = std::chrono::steady_clock::now();
  auto r = run_command(preprocess() + " --input " + (dir.path() / "in.jsonl").string() + " --output-prefix " +
                       (dir.path() / "out").string() + gpt2_flags() + " --append-eod --workers 1000");
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_LT(seconds, 30.0) << r.output;  // > 120 s before: 1000 tokenizer loads
  EXPECT_NE(r.output.find("requested workers"), std::string::npos) << r.output;
  EXPECT_TRUE(std::filesystem::exists(dir.path() / "out_text_document.idx"));
}

}  // namespace
