// BERT WordPiece as the bert_tokenization.py that Megatron vendors (Google's original): character
// classes from tokenizer_unicode.h, lower-casing and NFD through ICU, greedy longest-match pieces.
#include "tessera/data/tokenizer_bert_wordpiece.h"

#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include <fstream>
#include <sstream>

#include "tessera/core/error.h"
#include "tessera/data/tokenizer_unicode.h"

namespace tessera::data {
namespace {

std::string to_utf8(const std::u32string& text) {
  std::string out;
  out.reserve(text.size());
  for (const char32_t cp : text) unicode::append_utf8(out, cp);
  return out;
}

// Python's str.strip(): drop str.isspace() code points at both ends.
std::string_view python_strip(std::string_view text) {
  size_t begin = 0;
  while (begin < text.size()) {
    size_t next = begin;
    if (!unicode::python_is_space(unicode::next_code_point(text, next))) break;
    begin = next;
  }
  size_t end = begin;
  size_t content_end = begin;
  while (end < text.size()) {
    const char32_t cp = unicode::next_code_point(text, end);
    if (!unicode::python_is_space(cp)) content_end = end;
  }
  return text.substr(begin, content_end - begin);
}

// Python's str.replace(from, to): every non-overlapping occurrence, left to right.
void replace_all(std::string& text, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (true) {
    const size_t found = text.find(from, pos);
    if (found == std::string::npos) break;
    out.append(text, pos, found - pos);
    out.append(to);
    pos = found + from.size();
  }
  out.append(text, pos, std::string::npos);
  text = std::move(out);
}

}  // namespace

BertWordPieceTokenizer::BertWordPieceTokenizer(const std::string& vocab_file, bool lower_case,
                                               int64_t vocab_extra_ids)
    : lower_case_(lower_case) {
  std::ifstream in(vocab_file, std::ios::binary);
  if (!in) TESSERA_CONFIG_FAIL("cannot open the BERT vocab file '", vocab_file, "' (--vocab-file / data.vocab_file)");
  std::ostringstream content;
  content << in.rdbuf();
  const std::string text = content.str();
  // Megatron's load_vocab: one token a line (readline), stripped; the line number is the id.
  size_t begin = 0;
  while (begin < text.size()) {
    size_t newline = text.find('\n', begin);
    if (newline == std::string::npos) newline = text.size();
    const std::string token(python_strip(std::string_view(text).substr(begin, newline - begin)));
    const auto id = static_cast<int32_t>(tokens_.size());
    if (!ids_.try_emplace(token, id).second) {
      TESSERA_CONFIG_FAIL("BERT vocab file '", vocab_file, "' line ", id + 1, ": token '", token,
                          "' repeats line ", ids_.find(token)->second + 1);
    }
    tokens_.push_back(token);
    begin = newline + 1;
  }
  cls_id_ = require("[CLS]", vocab_file);
  sep_id_ = require("[SEP]", vocab_file);
  pad_id_ = require("[PAD]", vocab_file);
  mask_id_ = require("[MASK]", vocab_file);
  unk_id_ = require("[UNK]", vocab_file);
  bos_id_ = add_token("[BOS]");
  eos_id_ = add_token("[EOS]");
  if (vocab_extra_ids < 0) TESSERA_CONFIG_FAIL("vocab_extra_ids must be >= 0, got ", vocab_extra_ids);
  for (int64_t i = 0; i < vocab_extra_ids; ++i) {
    extra_ids_.push_back(add_token("<extra_id_" + std::to_string(i) + ">"));
  }
}

int32_t BertWordPieceTokenizer::require(const std::string& token, const std::string& vocab_file) const {
  const int32_t id = token_to_id(token);
  if (id < 0) TESSERA_CONFIG_FAIL("BERT vocab file '", vocab_file, "' has no '", token, "' token");
  return id;
}

int32_t BertWordPieceTokenizer::add_token(const std::string& token) {
  const auto [it, inserted] = ids_.try_emplace(token, static_cast<int32_t>(tokens_.size()));
  if (inserted) tokens_.push_back(token);
  return it->second;
}

int32_t BertWordPieceTokenizer::token_to_id(std::string_view token) const {
  const auto found = ids_.find(token);
  return found == ids_.end() ? -1 : found->second;
}

const std::string& BertWordPieceTokenizer::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= tokens_.size()) {
    TESSERA_FAIL(type_name(), ": token id ", id, " is not in the vocabulary (0..", tokens_.size() - 1, ")");
  }
  return tokens_[static_cast<size_t>(id)];
}

std::u32string BertWordPieceTokenizer::lower_and_strip_accents(const std::u32string& word) const {
  bool ascii = true;
  for (const char32_t cp : word) ascii = ascii && cp < 0x80;
  if (ascii) {
    std::u32string lowered = word;
    for (char32_t& cp : lowered) {
      if (cp >= 'A' && cp <= 'Z') cp += 'a' - 'A';
    }
    return lowered;
  }
  icu::UnicodeString text = icu::UnicodeString::fromUTF32(
      reinterpret_cast<const UChar32*>(word.data()), static_cast<int32_t>(word.size()));
  text.toLower(icu::Locale::getRoot());  // full case mapping incl. final sigma, as str.lower()
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* nfd = icu::Normalizer2::getNFDInstance(status);
  TESSERA_CHECK(U_SUCCESS(status), "ICU Normalizer2::getNFDInstance failed: ", u_errorName(status));
  const icu::UnicodeString decomposed = nfd->normalize(text, status);
  TESSERA_CHECK(U_SUCCESS(status), "ICU NFD normalization failed: ", u_errorName(status));
  std::u32string out;
  out.reserve(static_cast<size_t>(decomposed.length()));
  for (int32_t i = 0; i < decomposed.length();) {
    const UChar32 cp = decomposed.char32At(i);
    i = decomposed.moveIndex32(i, 1);
    if (!unicode::is_nonspacing_mark(static_cast<char32_t>(cp))) out.push_back(static_cast<char32_t>(cp));
  }
  return out;
}

void BertWordPieceTokenizer::split_on_punctuation(const std::u32string& word,
                                                  std::vector<std::string>& out) const {
  std::u32string current;
  const auto flush = [&] {
    if (!current.empty()) out.push_back(to_utf8(current));
    current.clear();
  };
  for (const char32_t cp : word) {
    if (unicode::bert_is_punctuation(cp)) {
      flush();
      current.push_back(cp);
      flush();
    } else if (unicode::python_is_space(cp)) {
      flush();  // the final whitespace_tokenize() of BasicTokenizer.tokenize
    } else {
      current.push_back(cp);
    }
  }
  flush();
}

std::vector<std::string> BertWordPieceTokenizer::basic_tokenize(std::string_view text) const {
  std::vector<std::string> words;
  std::u32string word;
  const auto flush = [&] {
    if (word.empty()) return;
    split_on_punctuation(lower_case_ ? lower_and_strip_accents(word) : word, words);
    word.clear();
  };
  size_t pos = 0;
  while (pos < text.size()) {
    const char32_t cp = unicode::next_code_point(text, pos);  // ill-formed UTF-8 -> U+FFFD: dropped
    // _clean_text: drop NUL, U+FFFD and control characters; whitespace separates words (also the
    // str.isspace() characters that _clean_text keeps but str.split() splits on, U+2028/U+2029).
    if (cp == 0 || cp == unicode::kReplacementChar || unicode::bert_is_control(cp)) continue;
    if (unicode::bert_is_whitespace(cp) || unicode::python_is_space(cp)) {
      flush();
    } else if (unicode::bert_is_cjk(cp)) {  // _tokenize_chinese_chars: a word of its own
      flush();
      word.push_back(cp);
      flush();
    } else {
      word.push_back(cp);
    }
  }
  flush();
  return words;
}

void BertWordPieceTokenizer::wordpiece(std::string_view word, std::vector<int32_t>& out) const {
  // Byte offsets of the code point boundaries: pieces are cut on code points, as list(token).
  std::vector<size_t> bounds;
  bounds.reserve(word.size() + 1);
  for (size_t pos = 0; pos < word.size();) {
    bounds.push_back(pos);
    unicode::next_code_point(word, pos);
  }
  bounds.push_back(word.size());
  const size_t chars = bounds.size() - 1;
  if (chars > kMaxCharsPerWord) {
    out.push_back(unk_id_);
    return;
  }
  const size_t first_piece = out.size();
  std::string candidate;
  size_t start = 0;
  while (start < chars) {
    int32_t found = -1;
    size_t end = chars;
    for (; end > start; --end) {
      candidate.assign(start > 0 ? "##" : "");
      candidate.append(word.substr(bounds[start], bounds[end] - bounds[start]));
      found = token_to_id(candidate);
      if (found >= 0) break;
    }
    if (found < 0) {
      out.resize(first_piece);
      out.push_back(unk_id_);
      return;
    }
    out.push_back(found);
    start = end;
  }
}

std::vector<int32_t> BertWordPieceTokenizer::tokenize(std::string_view text) const {
  std::vector<int32_t> ids;
  for (const std::string& word : basic_tokenize(text)) wordpiece(word, ids);
  return ids;
}

std::string BertWordPieceTokenizer::detokenize(std::span<const int32_t> ids) const {
  std::string text;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) text.push_back(' ');
    text += id_to_token(ids[i]);
  }
  replace_all(text, " ##", "");
  text = std::string(python_strip(text));
  // clean_up_tokenization, in Megatron's order.
  replace_all(text, " .", ".");
  replace_all(text, " ?", "?");
  replace_all(text, " !", "!");
  replace_all(text, " ,", ",");
  replace_all(text, " ' ", "'");
  replace_all(text, " n't", "n't");
  replace_all(text, " 'm", "'m");
  replace_all(text, " 's", "'s");
  replace_all(text, " 've", "'ve");
  replace_all(text, " 're", "'re");
  return text;
}

}  // namespace tessera::data
