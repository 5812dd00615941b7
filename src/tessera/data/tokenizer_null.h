// Megatron's NullTokenizer: text is already token ids written as whitespace-separated integers;
// --vocab-size V gives ids 0..V-1 plus the end-of-document id V (vocab_size() is V + 1).
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/data/tokenizer.h"

namespace tessera::data {

class NullTokenizer final : public Tokenizer {
 public:
  // vocab_size_without_eod: Megatron's --vocab-size (> 0); throws ConfigError otherwise.
  explicit NullTokenizer(int64_t vocab_size_without_eod);

  // "12 7 3" -> {12, 7, 3}. Throws Error naming the field for a field that is not a decimal
  // integer in [0, vocab_size()).
  std::vector<int32_t> tokenize(std::string_view text) const override;
  std::string detokenize(std::span<const int32_t> ids) const override;  // "12 7 3"
  int64_t vocab_size() const override { return vocab_size_without_eod_ + 1; }
  int32_t eod() const override { return static_cast<int32_t>(vocab_size_without_eod_); }
  std::string_view type_name() const override { return "NullTokenizer"; }

 private:
  int64_t vocab_size_without_eod_;
};

}  // namespace tessera::data
