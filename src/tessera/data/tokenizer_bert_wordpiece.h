// Megatron's BertWordPieceLowerCase / BertWordPieceCase: Google BERT's BasicTokenizer (clean text,
// split CJK, optional lower case + accent stripping, punctuation split) then greedy WordPiece.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tessera/data/tokenizer.h"

namespace tessera::data {

class BertWordPieceTokenizer final : public Tokenizer {
 public:
  // Words longer than this many code points become [UNK] (WordpieceTokenizer's default in the
  // bert_tokenization.py that Megatron vendors).
  static constexpr size_t kMaxCharsPerWord = 200;

  // Reads vocab.txt (one token a line, line number = id, lines stripped as Megatron does), then
  // adds "[BOS]", "[EOS]" and `vocab_extra_ids` tokens "<extra_id_i>" when absent, exactly as
  // Megatron's _BertWordPieceTokenizer. Throws ConfigError naming the file or a missing token.
  BertWordPieceTokenizer(const std::string& vocab_file, bool lower_case, int64_t vocab_extra_ids = 0);

  std::vector<int32_t> tokenize(std::string_view text) const override;
  // Megatron's convert_tokens_to_string: join with ' ', drop " ##", strip, undo the spaces before
  // . ? ! , and in ' n't 'm 's 've 're. Throws Error for an unknown id.
  std::string detokenize(std::span<const int32_t> ids) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(tokens_.size()); }
  int32_t eod() const override { return eos_id_; }  // Megatron: eod is eos, the added "[EOS]"
  std::string_view type_name() const override {
    return lower_case_ ? "BertWordPieceLowerCase" : "BertWordPieceCase";
  }

  int32_t cls() const { return cls_id_; }
  int32_t sep() const { return sep_id_; }
  int32_t pad() const { return pad_id_; }
  int32_t mask() const { return mask_id_; }
  int32_t unk() const { return unk_id_; }
  int32_t bos() const { return bos_id_; }
  int32_t eos() const { return eos_id_; }
  const std::vector<int32_t>& additional_special_token_ids() const { return extra_ids_; }
  int32_t token_to_id(std::string_view token) const;  // -1 if absent
  const std::string& id_to_token(int32_t id) const;   // throws Error for an unknown id

  // The BasicTokenizer stage alone: the words WordPiece will see (UTF-8).
  std::vector<std::string> basic_tokenize(std::string_view text) const;
  // The WordPiece stage alone for one word: appends its ids (or [UNK]) to `out`.
  void wordpiece(std::string_view word, std::vector<int32_t>& out) const;

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view key) const { return std::hash<std::string_view>{}(key); }
  };
  struct Equal {
    using is_transparent = void;
    bool operator()(std::string_view a, std::string_view b) const { return a == b; }
  };
  int32_t add_token(const std::string& token);  // Megatron's add_token: only if absent
  int32_t require(const std::string& token, const std::string& vocab_file) const;
  // Lower-cases (Python str.lower) and strips accents (NFD, drop Mn) of one whitespace-free word.
  std::u32string lower_and_strip_accents(const std::u32string& word) const;
  void split_on_punctuation(const std::u32string& word, std::vector<std::string>& out) const;

  bool lower_case_;
  std::unordered_map<std::string, int32_t, Hash, Equal> ids_;
  std::vector<std::string> tokens_;  // id -> token
  int32_t cls_id_ = -1, sep_id_ = -1, pad_id_ = -1, mask_id_ = -1, unk_id_ = -1;
  int32_t bos_id_ = -1, eos_id_ = -1;
  std::vector<int32_t> extra_ids_;
};

}  // namespace tessera::data
