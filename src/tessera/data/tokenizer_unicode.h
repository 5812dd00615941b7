// UTF-8 decoding/encoding and the Unicode character classes the tokenizers need (GPT-2's regex
// classes \p{L}, \p{N}, \s; BERT's whitespace/control/punctuation/CJK tests), backed by ICU.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tessera::data::unicode {

inline constexpr char32_t kReplacementChar = 0xFFFD;

// Decodes the code point starting at text[pos] and advances pos past it. An ill-formed sequence
// yields U+FFFD and advances past its maximal subpart (one byte at least), as Python's
// bytes.decode("utf-8", "replace") and ICU's U8_NEXT do.
char32_t next_code_point(std::string_view text, size_t& pos);

void append_utf8(std::string& out, char32_t code_point);

// Rewrites ill-formed UTF-8 with one U+FFFD per maximal invalid subpart (Python's errors="replace").
std::string replace_invalid_utf8(std::string_view bytes);

// The classes of GPT-2's pre-tokenizer pattern, with the semantics of Python's `regex` module:
// letter = \p{L} (general category L*), number = \p{N} (N*), space = \s (Unicode White_Space),
// other = everything else (including unassigned code points and U+FFFD).
enum class RegexClass : uint8_t { kLetter, kNumber, kSpace, kOther };

constexpr std::array<RegexClass, 128> make_ascii_regex_classes() {
  std::array<RegexClass, 128> classes{};
  for (int c = 0; c < 128; ++c) {
    RegexClass cls = RegexClass::kOther;
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) cls = RegexClass::kLetter;
    if (c >= '0' && c <= '9') cls = RegexClass::kNumber;
    if ((c >= 9 && c <= 13) || c == ' ') cls = RegexClass::kSpace;
    classes[static_cast<size_t>(c)] = cls;
  }
  return classes;
}
inline constexpr std::array<RegexClass, 128> kAsciiRegexClasses = make_ascii_regex_classes();

RegexClass regex_class_beyond_ascii(char32_t code_point);  // asks ICU
inline RegexClass regex_class(char32_t code_point) {
  return code_point < 128 ? kAsciiRegexClasses[code_point] : regex_class_beyond_ascii(code_point);
}

// BERT BasicTokenizer's tests (Google's bert/tokenization.py as vendored by Megatron-LM).
bool bert_is_whitespace(char32_t code_point);   // ' ', \t, \n, \r or category Zs
bool bert_is_control(char32_t code_point);      // category Cc or Cf, except \t, \n, \r
bool bert_is_punctuation(char32_t code_point);  // ASCII 33-47, 58-64, 91-96, 123-126 or category P*
bool bert_is_cjk(char32_t code_point);          // the CJK Unified Ideograph blocks BERT splits on
bool python_is_space(char32_t code_point);      // str.isspace(): what str.split() splits on
bool is_nonspacing_mark(char32_t code_point);   // category Mn

}  // namespace tessera::data::unicode
