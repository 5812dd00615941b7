// tessera-preprocess input lines: the input is a JSONL file encoded with a small WordPiece
// vocabulary, bad lines skipped (--skip-bad-lines) or fatal (first byte), sentences split or not.
#include "fuzz_util.h"
#include "tessera/data/preprocess.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  static const std::string vocab = tessera::fuzz::write_file(
      "wordpiece.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\na\n##s\nhello\nworld\n.\n,\n!\n").string();
  tessera::data::PreprocessOptions options;
  options.input = tessera::fuzz::write_file("input.jsonl", {reinterpret_cast<const char*>(data) + 1, size - 1}).string();
  options.output_prefix = (tessera::fuzz::scratch() / "out").string();
  options.json_keys = (data[0] & 4) ? std::vector<std::string>{"text", "title"} : std::vector<std::string>{"text"};
  options.tokenizer.type = "BertWordPieceLowerCase";
  options.tokenizer.vocab_file = vocab;
  options.skip_bad_lines = data[0] & 1;
  options.split_sentences = data[0] & 2;
  options.append_eod = true;
  options.workers = 1;
  options.log_interval = 1 << 30;
  tessera::fuzz::expect_clean([&] { (void)tessera::data::run_preprocess(options); });
  return 0;
}
