// make_tokenizer: builds a Tokenizer from Megatron's --tokenizer-type name and its files,
// checking the options each type needs before any file is read.
#include "tessera/data/tokenizer.h"

#include <filesystem>

#include "tessera/core/error.h"
#include "tessera/data/tokenizer_bert_wordpiece.h"
#include "tessera/data/tokenizer_gpt2_bpe.h"
#include "tessera/data/tokenizer_null.h"
#include "tessera/data/tokenizer_sentencepiece.h"

namespace tessera::data {
namespace {

constexpr const char* kAllowedTypes =
    "GPT2BPETokenizer, BertWordPieceLowerCase, BertWordPieceCase, SentencePieceTokenizer, NullTokenizer";

void require_file(const std::string& path, const std::string& type, const char* what,
                  const char* option) {
  if (path.empty()) {
    TESSERA_CONFIG_FAIL("tokenizer type ", type, " needs a ", what, ": set ", option);
  }
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) {
    TESSERA_CONFIG_FAIL("the ", what, " '", path, "' of tokenizer type ", type,
                        " does not exist or is not a file (", option, ")");
  }
}

}  // namespace

std::unique_ptr<Tokenizer> make_tokenizer(const TokenizerOptions& options) {
  const std::string& type = options.type;
  constexpr const char* kVocabOption = "--vocab-file / data.vocab_file";
  constexpr const char* kMergeOption = "--merge-file / data.merge_file";
  if (type == "GPT2BPETokenizer") {
    require_file(options.vocab_file, type, "vocab file", kVocabOption);
    require_file(options.merge_file, type, "merge file", kMergeOption);
    return std::make_unique<GPT2BPETokenizer>(options.vocab_file, options.merge_file);
  }
  if (type == "BertWordPieceLowerCase" || type == "BertWordPieceCase") {
    require_file(options.vocab_file, type, "vocab file", kVocabOption);
    return std::make_unique<BertWordPieceTokenizer>(options.vocab_file, type == "BertWordPieceLowerCase",
                                                    options.vocab_extra_ids);
  }
  if (type == "SentencePieceTokenizer") {
    require_file(options.tokenizer_model, type, "SentencePiece model", "--tokenizer-model / data.tokenizer_model");
    return std::make_unique<SentencePieceTokenizer>(options.tokenizer_model, options.vocab_extra_ids);
  }
  if (type == "NullTokenizer") {
    if (options.vocab_size <= 0) {
      TESSERA_CONFIG_FAIL("tokenizer type NullTokenizer needs --vocab-size / data.vocab_size > 0, got ",
                          options.vocab_size);
    }
    return std::make_unique<NullTokenizer>(options.vocab_size);
  }
  TESSERA_CONFIG_FAIL("unknown tokenizer type '", type, "' (--tokenizer-type / data.tokenizer_type); allowed: ",
                      kAllowedTypes);
}

}  // namespace tessera::data
