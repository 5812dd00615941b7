// SentencePieceTokenizer (Megatron's --tokenizer-type SentencePieceTokenizer with
// --tokenizer-model; HF's T5Tokenizer / mT5 vocabularies): a SentencePiece model encoded and
// decoded by libsentencepiece, then `vocab_extra_ids` sentinels "<extra_id_k>" appended after the
// model's pieces in HF T5's order (<extra_id_0> is the last id, vocab_size - 1), unless the model
// already holds them. tokenize() is HF's T5Tokenizer without special tokens (no </s> appended).
// Special ids: pad "<pad>", eos "</s>", unk "<unk>", bos "<s>" (-1 when absent); the decoder's
// start token is bos when the model has one, else pad (HF T5's decoder_start_token_id = pad).
//
// libsentencepiece is reached only through libtessera_sentencepiece.so (src/sentencepiece_shim, a C
// interface), loaded with dlopen(RTLD_LOCAL | RTLD_DEEPBIND) on first use: libsentencepiece carries
// its own copy of protobuf-lite, whose symbols clash with the protobuf that the TensorBoard writer
// links (linked directly, or loaded without DEEPBIND, one copy's calls land in the other). The
// shim is looked up at $TESSERA_SENTENCEPIECE_LIB, then next to the executable (../lib and its own
// folder), then on the loader's path; a missing shim is a ConfigError saying so. (Without
// RTLD_DEEPBIND, Debian's libsentencepiece 0.1.97 aborts at load: its bundled protobuf 3.14 code
// meets the process's libprotobuf 3.21. AddressSanitizer refuses RTLD_DEEPBIND, so sanitized builds
// have no SentencePieceTokenizer.)
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessera/data/tokenizer.h"

namespace tessera::data {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  // Throws ConfigError naming the model file or the missing shim library.
  SentencePieceTokenizer(const std::string& model_file, int64_t vocab_extra_ids = 0);
  ~SentencePieceTokenizer() override;

  // Sentinels written in the text ("<extra_id_0>") become their ids.
  std::vector<int32_t> tokenize(std::string_view text) const override;
  std::string detokenize(std::span<const int32_t> ids) const override;  // sentinels as "<extra_id_k>"
  int64_t vocab_size() const override { return model_size_ + static_cast<int64_t>(added_.size()); }
  int32_t eod() const override { return eos_; }
  std::string_view type_name() const override { return "SentencePieceTokenizer"; }
  // False in AddressSanitizer builds (ASan refuses RTLD_DEEPBIND); the constructor then throws.
  static bool available_in_this_build();

  int32_t pad() const { return pad_; }
  int32_t eos() const { return eos_; }
  int32_t unk() const { return unk_; }
  int32_t bos() const { return bos_; }
  int32_t decoder_start() const { return bos_ >= 0 ? bos_ : pad_; }
  const std::vector<int32_t>& additional_special_token_ids() const { return extra_ids_; }  // <extra_id_0>, ...
  int32_t token_to_id(const std::string& piece) const;  // -1 if absent
  std::string id_to_token(int32_t id) const;            // throws Error for an unknown id
  // True for a model piece that does not start a word (no leading U+2581); false for specials.
  bool continues_word(int32_t id) const;

 private:
  std::vector<int32_t> encode(std::string_view text) const;  // libsentencepiece alone
  struct Shim;
  std::shared_ptr<const Shim> shim_;
  void* model_ = nullptr;
  int64_t model_size_ = 0;
  std::vector<std::string> added_;  // ids model_size_.. : the added sentinels
  std::vector<int32_t> extra_ids_;
  int32_t pad_ = -1, eos_ = -1, unk_ = -1, bos_ = -1;
};

}  // namespace tessera::data
