// NullTokenizer: parses and prints whitespace-separated integer ids (Megatron's _NullTokenizer,
// which splits on ' ' and calls int(); we also accept tabs/newlines and check the range).
#include "tessera/data/tokenizer_null.h"

#include <charconv>
#include <limits>

#include "tessera/core/error.h"

namespace tessera::data {

NullTokenizer::NullTokenizer(int64_t vocab_size_without_eod) : vocab_size_without_eod_(vocab_size_without_eod) {
  if (vocab_size_without_eod <= 0 || vocab_size_without_eod >= std::numeric_limits<int32_t>::max()) {
    TESSERA_CONFIG_FAIL("NullTokenizer needs --vocab-size / data.vocab_size in [1, ",
                        std::numeric_limits<int32_t>::max() - 1, "], got ", vocab_size_without_eod);
  }
}

std::vector<int32_t> NullTokenizer::tokenize(std::string_view text) const {
  std::vector<int32_t> ids;
  const auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; };
  size_t pos = 0;
  while (pos < text.size()) {
    while (pos < text.size() && is_space(text[pos])) ++pos;
    const size_t start = pos;
    while (pos < text.size() && !is_space(text[pos])) ++pos;
    if (pos == start) break;
    const std::string_view field = text.substr(start, pos - start);
    int64_t value = -1;
    const auto [end, error] = std::from_chars(field.data(), field.data() + field.size(), value);
    if (error != std::errc() || end != field.data() + field.size() || value < 0 || value >= vocab_size()) {
      TESSERA_FAIL("NullTokenizer: '", field, "' is not a token id in [0, ", vocab_size(),
                   "); the text must be whitespace-separated integers");
    }
    ids.push_back(static_cast<int32_t>(value));
  }
  return ids;
}

std::string NullTokenizer::detokenize(std::span<const int32_t> ids) const {
  std::string text;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) text.push_back(' ');
    text += std::to_string(ids[i]);
  }
  return text;
}

}  // namespace tessera::data
