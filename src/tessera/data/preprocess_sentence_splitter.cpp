#include "tessera/data/preprocess_sentence_splitter.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <string>

namespace tessera::data {

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_closing(char c) { return c == '"' || c == '\'' || c == ')' || c == ']' || c == '}'; }
bool is_upper(char c) { return c >= 'A' && c <= 'Z'; }

bool is_abbreviation(std::string_view word) {
  static constexpr std::array<std::string_view, 40> kAbbreviations = {
      "mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "vs", "etc", "e.g", "i.e", "no", "mt", "capt", "col",
      "gen", "lt", "rev", "hon", "gov", "sgt", "inc", "ltd", "co", "jan", "feb", "mar", "apr", "aug", "sep",
      "sept", "oct", "nov", "dec", "fig", "al", "esq", "messrs", "u.s"};
  std::string lower(word);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (lower.size() == 1 && std::isalpha(static_cast<unsigned char>(lower[0]))) return true;  // an initial
  return std::find(kAbbreviations.begin(), kAbbreviations.end(), lower) != kAbbreviations.end();
}

// Whether a sentence may start at text[k] (the first non-space character after a terminator).
bool starts_sentence(std::string_view text, size_t k) {
  const char c = text[k];
  if (is_upper(c) || (c >= '0' && c <= '9')) return true;
  if (c == '"' || c == '\'' || c == '(' || c == '[' || c == '_') return true;
  return static_cast<unsigned char>(c) >= 0x80;  // e.g. a curly quote or a non-ASCII capital
}

void push_trimmed(std::vector<std::string_view>& out, std::string_view text, size_t begin, size_t end) {
  while (begin < end && is_space(text[begin])) ++begin;
  while (end > begin && is_space(text[end - 1])) --end;
  if (end > begin) out.push_back(text.substr(begin, end - begin));
}

}  // namespace

std::vector<std::string_view> split_sentences(std::string_view text) {
  std::vector<std::string_view> out;
  size_t start = 0, i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (c == '\n') {  // a blank line ends the sentence
      size_t k = i + 1;
      while (k < text.size() && (text[k] == ' ' || text[k] == '\t' || text[k] == '\r')) ++k;
      if (k < text.size() && text[k] == '\n') {
        push_trimmed(out, text, start, i);
        while (k < text.size() && is_space(text[k])) ++k;
        start = i = k;
        continue;
      }
      ++i;
      continue;
    }
    if (c != '.' && c != '!' && c != '?') {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < text.size() && (text[j] == '.' || text[j] == '!' || text[j] == '?')) ++j;
    while (j < text.size() && is_closing(text[j])) ++j;
    if (j < text.size() && !is_space(text[j])) {
      i = j;
      continue;
    }
    size_t k = j;
    while (k < text.size() && is_space(text[k])) ++k;
    bool split = k == text.size() || starts_sentence(text, k);
    if (split && c == '.' && j == i + 1) {  // a single '.' may end an abbreviation
      size_t w = i;
      while (w > start && (std::isalpha(static_cast<unsigned char>(text[w - 1])) || text[w - 1] == '.')) --w;
      if (w < i && is_abbreviation(text.substr(w, i - w)) && k < text.size()) split = false;
    }
    if (split) {
      push_trimmed(out, text, start, j);
      start = k;
    }
    i = k > j ? k : j;
  }
  push_trimmed(out, text, start, text.size());
  return out;
}

}  // namespace tessera::data
