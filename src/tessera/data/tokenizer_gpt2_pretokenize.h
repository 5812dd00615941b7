// GPT-2's pre-tokenizer: the regex 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|
// \s+(?!\S)|\s+ with Python `regex` semantics (leftmost alternative wins), scanned by hand.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::data {

// Returns the end (byte offset) of the pre-token that starts at byte `begin` < text.size().
// Ill-formed UTF-8 is classed as "other" (like U+FFFD) and keeps its bytes.
size_t gpt2_pretoken_end(std::string_view text, size_t begin);

// All pre-tokens of `text`, in order (views into text). Their concatenation is text.
std::vector<std::string_view> gpt2_pretokenize(std::string_view text);

}  // namespace tessera::data
