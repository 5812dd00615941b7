// GPT-2's pre-tokenizer scanned by hand over UTF-8 with the classes of tokenizer_unicode.h; the
// alternatives are tried in the pattern's order at each position, as the regex engine does.
#include "tessera/data/tokenizer_gpt2_pretokenize.h"

#include "tessera/data/tokenizer_unicode.h"

namespace tessera::data {
namespace {

using unicode::RegexClass;

// Length of the contraction ('s 't 're 've 'm 'll 'd, case-sensitive) at text[pos], or 0.
size_t contraction_length(std::string_view text, size_t pos) {
  if (pos + 1 >= text.size()) return 0;
  const char c1 = text[pos + 1];
  if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
  if (pos + 2 >= text.size()) return 0;
  const char c2 = text[pos + 2];
  if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
  return 0;
}

// Class of the code point at pos and where it ends (ASCII without leaving this file).
inline RegexClass class_at(std::string_view text, size_t pos, size_t& next) {
  const auto byte = static_cast<unsigned char>(text[pos]);
  if (byte < 0x80) {
    next = pos + 1;
    return unicode::kAsciiRegexClasses[byte];
  }
  next = pos;
  return unicode::regex_class_beyond_ascii(unicode::next_code_point(text, next));
}

// End of the run of code points of class `cls` that starts at pos (pos's own class is cls).
size_t run_end(std::string_view text, size_t pos, RegexClass cls) {
  while (pos < text.size()) {
    size_t next = 0;
    if (class_at(text, pos, next) != cls) break;
    pos = next;
  }
  return pos;
}

}  // namespace

size_t gpt2_pretoken_end(std::string_view text, size_t begin) {
  if (text[begin] == '\'') {
    if (const size_t length = contraction_length(text, begin)) return begin + length;
  }
  size_t after_first = 0;
  const RegexClass first = class_at(text, begin, after_first);
  // " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+": one optional ' ', then a run of one class.
  if (text[begin] == ' ' && after_first < text.size()) {
    size_t after_second = 0;
    const RegexClass second = class_at(text, after_first, after_second);
    if (second != RegexClass::kSpace) return run_end(text, after_second, second);
  }
  if (first != RegexClass::kSpace) return run_end(text, after_first, first);
  // "\s+(?!\S)" then "\s+": a whitespace run; if a non-space follows and the run has two or more
  // code points, its last code point is left to prefix the next pre-token.
  size_t last_start = begin;
  size_t pos = after_first;
  size_t count = 1;
  while (pos < text.size()) {
    size_t next = 0;
    if (class_at(text, pos, next) != RegexClass::kSpace) break;
    last_start = pos;
    pos = next;
    ++count;
  }
  if (pos < text.size() && count >= 2) return last_start;
  return pos;
}

std::vector<std::string_view> gpt2_pretokenize(std::string_view text) {
  std::vector<std::string_view> pieces;
  size_t begin = 0;
  while (begin < text.size()) {
    const size_t end = gpt2_pretoken_end(text, begin);
    pieces.push_back(text.substr(begin, end - begin));
    begin = end;
  }
  return pieces;
}

}  // namespace tessera::data
