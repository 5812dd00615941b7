// UTF-8 decoding/encoding and the Unicode character classes the tokenizers need, backed by ICU
// (u_charType / U_GET_GC_MASK for general categories, u_isUWhiteSpace for White_Space).
#include "tessera/data/tokenizer_unicode.h"

#include <unicode/uchar.h>
#include <unicode/utf8.h>

namespace tessera::data::unicode {

char32_t next_code_point(std::string_view text, size_t& pos) {
  const auto byte = static_cast<unsigned char>(text[pos]);
  if (byte < 0x80) {
    ++pos;
    return byte;
  }
  const auto* data = reinterpret_cast<const uint8_t*>(text.data());
  const auto length = static_cast<int32_t>(text.size());
  auto index = static_cast<int32_t>(pos);
  UChar32 code_point = 0;
  U8_NEXT(data, index, length, code_point);
  pos = static_cast<size_t>(index);
  return code_point < 0 ? kReplacementChar : static_cast<char32_t>(code_point);
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string replace_invalid_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t pos = 0;
  while (pos < bytes.size()) {
    const size_t start = pos;
    const auto byte = static_cast<unsigned char>(bytes[pos]);
    if (byte < 0x80) {
      out.push_back(static_cast<char>(byte));
      ++pos;
      continue;
    }
    const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
    auto index = static_cast<int32_t>(pos);
    UChar32 code_point = 0;
    U8_NEXT(data, index, static_cast<int32_t>(bytes.size()), code_point);
    pos = static_cast<size_t>(index);
    if (code_point < 0) {
      append_utf8(out, kReplacementChar);
    } else {
      out.append(bytes.substr(start, pos - start));
    }
  }
  return out;
}

namespace {

uint32_t category_mask(char32_t cp) { return U_GET_GC_MASK(static_cast<UChar32>(cp)); }

}  // namespace

RegexClass regex_class_beyond_ascii(char32_t cp) {
  const uint32_t mask = category_mask(cp);
  if (mask & U_GC_L_MASK) return RegexClass::kLetter;
  if (mask & U_GC_N_MASK) return RegexClass::kNumber;
  if (u_isUWhiteSpace(static_cast<UChar32>(cp))) return RegexClass::kSpace;
  return RegexClass::kOther;
}

bool bert_is_whitespace(char32_t cp) {
  if (cp == ' ' || cp == '\t' || cp == '\n' || cp == '\r') return true;
  return u_charType(static_cast<UChar32>(cp)) == U_SPACE_SEPARATOR;
}

bool bert_is_control(char32_t cp) {
  if (cp == '\t' || cp == '\n' || cp == '\r') return false;
  const int8_t type = u_charType(static_cast<UChar32>(cp));
  return type == U_CONTROL_CHAR || type == U_FORMAT_CHAR;
}

bool bert_is_punctuation(char32_t cp) {
  if ((cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) ||
      (cp >= 123 && cp <= 126)) {
    return true;
  }
  return (category_mask(cp) & U_GC_P_MASK) != 0;
}

bool bert_is_cjk(char32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
         (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
         (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B820 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

bool python_is_space(char32_t cp) {
  // CPython's str.isspace(): bidirectional class WS, B or S, or category Zs.
  if (u_charType(static_cast<UChar32>(cp)) == U_SPACE_SEPARATOR) return true;
  const auto direction = u_charDirection(static_cast<UChar32>(cp));
  return direction == U_WHITE_SPACE_NEUTRAL || direction == U_BLOCK_SEPARATOR ||
         direction == U_SEGMENT_SEPARATOR;
}

bool is_nonspacing_mark(char32_t cp) {
  return u_charType(static_cast<UChar32>(cp)) == U_NON_SPACING_MARK;
}

}  // namespace tessera::data::unicode
