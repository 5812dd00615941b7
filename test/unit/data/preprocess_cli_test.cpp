// tessera-preprocess end to end (the built binary from TESSERA_BIN_DIR): outputs readable by
// Tessera and idx_inspect.py, .gz input, sentences, workers/ranks agreement, and bad input
// (exit 2, message with file[:line], nothing left behind).
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstring>

#include "data_test_util.h"
#include "tessera/data/indexed_dataset.h"
#include "tessera/data/tokenizer.h"
#include "shared_fixture.h"
#include "test_paths.h"

using namespace tessera;
using tessera::test::run_command;
using tessera::test::TempDir;

namespace {

// TESSERA_BIN_DIR if it holds the binary, else the folder of this test executable (build/bin too).
std::string binary() {
  const auto from_env = tessera::test::bin_dir() / "tessera-preprocess";
  if (std::filesystem::exists(from_env)) return from_env.string();
  return (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "tessera-preprocess").string();
}
// The GPT-2 vocabulary in the repository (share/tokenizers/gpt2, the same files as shared/data/tokenizers/gpt2).
std::string gpt2(const char* file) { return (tessera::test::source_dir() / "share/tokenizers/gpt2" / file).string(); }
std::string idx_inspect() { return (tessera::test::shared_dir() / "tools" / "idx_inspect.py").string(); }
std::string tokenizer_flags() {
  return " --tokenizer-type GPT2BPETokenizer --vocab-file " + gpt2("vocab.json") + " --merge-file " + gpt2("merges.txt");
}
const char* kCorpus =
    "{\"text\": \"It is a truth universally acknowledged. Mr. Darcy agreed!\", \"id\": 1}\n"
    "{\"text\": \"\", \"id\": 2}\n"
    "{\"text\": \"Emma Woodhouse, handsome, clever, and rich.\", \"title\": \"E\"}\n"
    "{\"text\": \"Caf\\u00e9 \\u00a3 5\\nline two\", \"id\": 4}\n";

std::vector<int64_t> tokens_of(const std::string& text, bool eod) {
  auto tok = data::make_tokenizer({"GPT2BPETokenizer", gpt2("vocab.json"), gpt2("merges.txt"), 0});
  auto ids = tok->tokenize(text);
  std::vector<int64_t> out(ids.begin(), ids.end());
  if (eod && !out.empty()) out.push_back(tok->eod());
  return out;
}

void expect_no_output(const TempDir& dir, const std::string& input_name) {
  for (const auto& name : dir.entries()) EXPECT_EQ(name, input_name) << "left behind: " << name;
}

}  // namespace

TEST(PreprocessCli, HelpVersionAndUsageErrors) {
  auto help = run_command(binary() + " --help");
  EXPECT_EQ(help.exit_code, 0) << help.output;
  for (const char* flag : {"--input", "--output-prefix", "--json-keys", "--tokenizer-type", "--vocab-file", "--merge-file",
                           "--append-eod", "--workers", "--split-sentences", "--skip-bad-lines", "--log-interval"})
    EXPECT_NE(help.output.find(flag), std::string::npos) << flag;
  EXPECT_NE(help.output.find("(=1000)"), std::string::npos) << "defaults are listed";
  auto version = run_command(binary() + " --version");
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_NE(version.output.find("tessera-preprocess"), std::string::npos);
  EXPECT_EQ(run_command(binary() + " --no-such-flag").exit_code, 2);
  EXPECT_EQ(run_command(binary() + " --output-prefix x").exit_code, 2);  // no --input
}

TEST(PreprocessCli, EncodesDocumentsThatTesseraAndIdxInspectRead) {
  TESSERA_REQUIRE_SHARED_FILE(idx_inspect());
  TempDir dir;
  tessera::test::write_file(dir / "in.jsonl", kCorpus);
  auto r = run_command(binary() + " --input " + (dir / "in.jsonl") + " --output-prefix " + (dir / "out") +
                       tokenizer_flags() + " --append-eod --workers 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  data::IndexedDataset ds(dir / "out_text_document");
  EXPECT_EQ(ds.dtype(), data::IndexDType::uint16);
  ASSERT_EQ(ds.document_count(), 4);
  EXPECT_EQ(ds.document(0), tokens_of("It is a truth universally acknowledged. Mr. Darcy agreed!", true));
  EXPECT_TRUE(ds.document(1).empty());  // empty text: an empty document, no EOD (as Megatron)
  EXPECT_EQ(ds.document(3), tokens_of("Caf\xc3\xa9 \xc2\xa3 5\nline two", true));
  EXPECT_EQ(ds.document(0).back(), 50256);
  const std::string tool = idx_inspect();
  auto summary = run_command("python3 " + tool + " " + (dir / "out_text_document"));
  EXPECT_EQ(summary.exit_code, 0) << summary.output;
  for (int d = 0; d < 4; ++d) {
    auto doc = run_command("python3 " + tool + " " + (dir / "out_text_document") + " --doc " + std::to_string(d));
    std::string expected;
    for (int64_t v : ds.document(d)) expected += (expected.empty() ? "" : " ") + std::to_string(v);
    EXPECT_EQ(doc.output, expected + "\n");
  }
  // Same bytes with one worker, and from a .gz of the same input.
  gzFile gz = gzopen((dir / "in.jsonl.gz").c_str(), "wb");
  ASSERT_NE(gz, nullptr);
  gzwrite(gz, kCorpus, static_cast<unsigned>(std::strlen(kCorpus)));
  gzclose(gz);
  ASSERT_EQ(run_command(binary() + " --input " + (dir / "in.jsonl.gz") + " --output-prefix " + (dir / "gz") +
                        tokenizer_flags() + " --append-eod --workers 1").exit_code, 0);
  EXPECT_EQ(tessera::test::read_file(dir / "gz_text_document.bin"), tessera::test::read_file(dir / "out_text_document.bin"));
  EXPECT_EQ(tessera::test::read_file(dir / "gz_text_document.idx"), tessera::test::read_file(dir / "out_text_document.idx"));
}

TEST(PreprocessCli, SplitSentencesAndSeveralKeys) {
  TempDir dir;
  tessera::test::write_file(dir / "in.jsonl",
                            "{\"text\": \"One here. Two there! Three?\", \"title\": \"T1\"}\n"
                            "{\"text\": \"Solo\", \"title\": \"T2\"}\n");
  auto r = run_command(binary() + " --input " + (dir / "in.jsonl") + " --output-prefix " + (dir / "s") +
                       tokenizer_flags() + " --split-sentences --append-eod --json-keys text title");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  data::IndexedDataset text(dir / "s_text_sentence");
  ASSERT_EQ(text.document_count(), 2);
  EXPECT_EQ(text.document_index(1), 3);  // three sentences, three sequences
  EXPECT_EQ(text.sequence(0), tokens_of("One here.", false));
  EXPECT_EQ(text.sequence(2), tokens_of("Three?", true));  // EOD on the last sentence
  data::IndexedDataset title(dir / "s_title_sentence");
  EXPECT_EQ(title.document(1), tokens_of("T2", true));
}

TEST(PreprocessCli, MpiRanksGiveTheSameBytesAsOneProcess) {
  if (run_command("command -v mpirun").exit_code != 0) GTEST_SKIP() << "no mpirun";
  TempDir dir;
  std::string corpus;
  for (int i = 0; i < 40; ++i) corpus += "{\"text\": \"Document number " + std::to_string(i) + " speaks.\"}\n";
  tessera::test::write_file(dir / "in.jsonl", corpus);
  ASSERT_EQ(run_command(binary() + " --input " + (dir / "in.jsonl") + " --output-prefix " + (dir / "one") +
                        tokenizer_flags() + " --append-eod").exit_code, 0);
  auto r = run_command("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe -np 3 " + binary() +
                       " --input " + (dir / "in.jsonl") + " --output-prefix " + (dir / "three") + tokenizer_flags() +
                       " --append-eod");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(tessera::test::read_file(dir / "three_text_document.bin"), tessera::test::read_file(dir / "one_text_document.bin"));
  EXPECT_EQ(tessera::test::read_file(dir / "three_text_document.idx"), tessera::test::read_file(dir / "one_text_document.idx"));
  for (const auto& name : dir.entries()) EXPECT_NE(name[0], '.') << "temporary left behind: " << name;
}

TEST(PreprocessCli, BadJsonAndMissingKeyExitTwoNamingFileAndLineLeavingNothing) {
  TempDir dir;
  tessera::test::write_file(dir / "bad.jsonl", "{\"text\": \"fine\"}\n{\"text\": \"ok\"}\n{\"text\": broken}\n{\"text\": \"x\"}\n");
  auto r = run_command(binary() + " --input " + (dir / "bad.jsonl") + " --output-prefix " + (dir / "out") + tokenizer_flags());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("bad.jsonl:3"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("malformed JSON"), std::string::npos) << r.output;
  expect_no_output(dir, "bad.jsonl");

  TempDir dir2;
  tessera::test::write_file(dir2 / "nokey.jsonl", "{\"text\": \"fine\"}\n{\"body\": \"no text key\"}\n");
  r = run_command(binary() + " --input " + (dir2 / "nokey.jsonl") + " --output-prefix " + (dir2 / "out") + tokenizer_flags());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("nokey.jsonl:2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("missing key \"text\""), std::string::npos) << r.output;
  expect_no_output(dir2, "nokey.jsonl");

  // With --skip-bad-lines the bad lines are counted and reported, the rest is written.
  tessera::test::write_file(dir / "bad2.jsonl", "{\"text\": \"fine\"}\nnot json\n{\"other\": 1}\n{\"text\": \"x\"}\n");
  r = run_command(binary() + " --input " + (dir / "bad2.jsonl") + " --output-prefix " + (dir / "skip") + tokenizer_flags() +
                  " --skip-bad-lines");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("skipped 2 bad line"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("bad2.jsonl:2"), std::string::npos) << r.output;
  data::IndexedDataset kept(dir / "skip_text_document");
  EXPECT_EQ(kept.document_count(), 2);

  // Missing input file, and a corrupt .gz.
  r = run_command(binary() + " --input " + (dir / "absent.jsonl") + " --output-prefix " + (dir / "z") + tokenizer_flags());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("absent.jsonl"), std::string::npos) << r.output;
  for (const std::string bytes : {std::string("\x1f\x8b\x08\x00garbage-that-is-not-deflate", 31), std::string("\x1f\x8b\x08", 3)}) {
    tessera::test::write_file(dir / "corrupt.jsonl.gz", bytes);
    r = run_command(binary() + " --input " + (dir / "corrupt.jsonl.gz") + " --output-prefix " + (dir / "z") + tokenizer_flags());
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find("corrupt.jsonl.gz"), std::string::npos) << r.output;
    EXPECT_FALSE(std::filesystem::exists(dir / "z_text_document.bin"));
  }
}

TEST(PreprocessCli, BadDatasetFilesExitTwoNamingTheFile) {
  TempDir dir;
  tessera::test::write_file(dir / "in.jsonl", kCorpus);
  ASSERT_EQ(run_command(binary() + " --input " + (dir / "in.jsonl") + " --output-prefix " + (dir / "ok") + tokenizer_flags() +
                        " --append-eod").exit_code, 0);
  const std::string idx = tessera::test::read_file(dir / "ok_text_document.idx");
  const std::string bin = tessera::test::read_file(dir / "ok_text_document.bin");
  auto check = [&](const std::string& name, const std::string& idx_bytes, const std::string& bin_bytes,
                   const std::string& bad_file, const std::string& words) {
    tessera::test::write_file(dir / (name + ".idx"), idx_bytes);
    tessera::test::write_file(dir / (name + ".bin"), bin_bytes);
    auto r = run_command(binary() + " --inspect " + (dir / name));
    EXPECT_EQ(r.exit_code, 2) << name << ": " << r.output;
    EXPECT_NE(r.output.find(name + bad_file), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(words), std::string::npos) << r.output;
    // Merging a bad dataset fails the same way and writes nothing.
    auto m = run_command(binary() + " --merge " + (dir / "ok_text_document") + " " + (dir / name) + " --output-prefix " +
                         (dir / ("merged_" + name)));
    EXPECT_EQ(m.exit_code, 2) << m.output;
    EXPECT_FALSE(std::filesystem::exists(dir / ("merged_" + name + ".bin")));
    EXPECT_FALSE(std::filesystem::exists(dir / ("merged_" + name + ".idx")));
  };
  std::string magic = idx;
  magic[3] = 'Q';
  check("magic", magic, bin, ".idx", "bad magic");
  std::string version = idx;
  version[9] = 3;
  check("version", version, bin, ".idx", "version 3");
  check("truncated", idx, bin.substr(0, bin.size() / 2), ".bin", "truncated");
  std::string pointer = idx;
  pointer[data::kIndexHeaderBytes + 4 * 4 + 8 * 2] ^= 0x10;  // sequence 2's pointer (4 sequences)
  check("pointer", pointer, bin, ".idx", "pointer mismatch");
  auto good = run_command(binary() + " --inspect " + (dir / "ok_text_document"));
  EXPECT_EQ(good.exit_code, 0) << good.output;
  for (const auto& name : dir.entries()) EXPECT_EQ(name.find("merge-tmp"), std::string::npos) << name;
}
