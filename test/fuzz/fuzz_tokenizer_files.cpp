// Tokenizer files: first byte picks GPT-2 BPE (the rest split at the first NUL into vocab.json and
// merges.txt) or BERT WordPiece (the rest is vocab.txt). Loading must accept or throw an Error;
// an accepted tokenizer must tokenize and detokenize text.
#include <string>

#include "fuzz_util.h"
#include "tessera/data/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  tessera::data::TokenizerOptions options;
  if (data[0] & 1) {
    options.type = (data[0] & 2) ? "BertWordPieceLowerCase" : "BertWordPieceCase";
    options.vocab_file = tessera::fuzz::write_file("vocab.txt", rest).string();
  } else {
    auto nul = rest.find('\0');
    options.type = "GPT2BPETokenizer";
    options.vocab_file = tessera::fuzz::write_file("vocab.json", rest.substr(0, nul)).string();
    options.merge_file =
        tessera::fuzz::write_file("merges.txt", nul == std::string::npos ? "" : rest.substr(nul + 1)).string();
  }
  tessera::fuzz::expect_clean([&] {
    auto tokenizer = tessera::data::make_tokenizer(options);
    auto ids = tokenizer->tokenize("Hello, world! Caf\xc3\xa9 don't 123 \xe4\xb8\xad\xe6\x96\x87  tabs\tand\nlines");
    (void)tokenizer->detokenize(ids);
    (void)tokenizer->eod();
  });
  return 0;
}
