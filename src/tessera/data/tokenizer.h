// The tokenizer interface shared by tessera-preprocess, the datasets and generation, and the
// factory that builds one from Megatron's --tokenizer-type names.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::vector<int32_t> tokenize(std::string_view text) const = 0;
  virtual std::string detokenize(std::span<const int32_t> ids) const = 0;
  virtual int64_t vocab_size() const = 0;  // before padding
  virtual int32_t eod() const = 0;         // end-of-document id appended by --append-eod
  virtual std::string_view type_name() const = 0;
};

struct TokenizerOptions {
  std::string type;        // GPT2BPETokenizer | BertWordPieceLowerCase | BertWordPieceCase | SentencePieceTokenizer | NullTokenizer
  std::string vocab_file;
  std::string merge_file;
  int64_t vocab_size = 0;  // NullTokenizer only
  int64_t vocab_extra_ids = 0;  // BertWordPiece* / SentencePieceTokenizer: sentinels <extra_id_k> (T5)
  std::string tokenizer_model;  // SentencePieceTokenizer: the .model file
};

// Throws ConfigError naming the type (and the allowed ones) or the missing file.
std::unique_ptr<Tokenizer> make_tokenizer(const TokenizerOptions& options);

}  // namespace tessera::data
