// GPT-2 byte-level BPE as Megatron's gpt2_tokenization.py: files are read like Megatron reads them
// (vocab.json as a JSON object; merges.txt split on '\n', keeping [1:-1]), merges run on symbol ids.
#include "tessera/data/tokenizer_gpt2_bpe.h"

#include <algorithm>
#include <array>
#include <climits>
#include <fstream>
#include <functional>
#include <iterator>
#include <queue>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tessera/core/error.h"
#include "tessera/core/logging.h"
#include "tessera/data/tokenizer_gpt2_pretokenize.h"
#include "tessera/data/tokenizer_unicode.h"

namespace tessera::data {
namespace {

// Words up to this many bytes merge by repeated scans; longer ones through the priority queue.
constexpr size_t kMaxScanSymbols = 32;
constexpr size_t kCacheSlotsPerShard = 1 << 13;  // 64 shards x 8192 slots x 64 B = 32 MiB at most

// GPT-2's bytes_to_unicode(): printable Latin-1 bytes map to themselves, the other 68 bytes to
// U+0100 onwards, in byte order.
std::array<char32_t, 256> bytes_to_unicode() {
  std::array<char32_t, 256> table{};
  std::array<bool, 256> printable{};
  for (int b = '!'; b <= '~'; ++b) printable[b] = true;
  for (int b = 0xA1; b <= 0xAC; ++b) printable[b] = true;
  for (int b = 0xAE; b <= 0xFF; ++b) printable[b] = true;
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) table[b] = printable[b] ? static_cast<char32_t>(b) : next++;
  return table;
}

std::string read_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) TESSERA_CONFIG_FAIL("cannot open the ", what, " '", path, "'");
  std::ostringstream content;
  content << in.rdbuf();
  if (in.bad()) TESSERA_CONFIG_FAIL("cannot read the ", what, " '", path, "'");
  return content.str();
}

std::vector<std::string_view> split_ascii_whitespace(std::string_view line) {
  std::vector<std::string_view> fields;
  size_t pos = 0;
  const auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; };
  while (pos < line.size()) {
    while (pos < line.size() && is_space(line[pos])) ++pos;
    const size_t start = pos;
    while (pos < line.size() && !is_space(line[pos])) ++pos;
    if (pos > start) fields.push_back(line.substr(start, pos - start));
  }
  return fields;
}

}  // namespace

// ---- MergeTable ------------------------------------------------------------------------------

namespace {
constexpr uint64_t kEmptyKey = ~uint64_t{0};
inline uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}
}  // namespace

void GPT2BPETokenizer::MergeTable::build(const std::vector<std::pair<uint64_t, Merge>>& entries) {
  size_t capacity = 16;
  while (capacity < entries.size() * 2) capacity <<= 1;
  keys_.assign(capacity, kEmptyKey);
  values_.assign(capacity, Merge{0, 0});
  mask_ = capacity - 1;
  for (const auto& [entry_key, merge] : entries) {
    uint64_t slot = mix(entry_key) & mask_;
    while (keys_[slot] != kEmptyKey && keys_[slot] != entry_key) slot = (slot + 1) & mask_;
    keys_[slot] = entry_key;  // a repeated pair keeps its last rank, as Python's dict(zip(...))
    values_[slot] = merge;
  }
}

const GPT2BPETokenizer::Merge* GPT2BPETokenizer::MergeTable::find(int32_t left, int32_t right) const {
  const uint64_t wanted = key(left, right);
  uint64_t slot = mix(wanted) & mask_;
  while (true) {
    const uint64_t stored = keys_[slot];
    if (stored == wanted) return &values_[slot];
    if (stored == kEmptyKey) return nullptr;
    slot = (slot + 1) & mask_;
  }
}

// ---- loading ---------------------------------------------------------------------------------

GPT2BPETokenizer::GPT2BPETokenizer(const std::string& vocab_file, const std::string& merge_file)
    : cache_(kCacheSlotsPerShard) {
  load_vocab(vocab_file);
  const auto byte_chars = bytes_to_unicode();
  for (int b = 0; b < 256; ++b) {
    std::string token;
    unicode::append_utf8(token, byte_chars[b]);
    byte_symbol_[b] = symbol_of(token);
  }
  load_merges(merge_file);
}

int32_t GPT2BPETokenizer::symbol_of(const std::string& token) {
  const auto [it, inserted] =
      symbol_by_token_.try_emplace(token, static_cast<int32_t>(symbol_id_.size()));
  if (inserted) symbol_id_.push_back(0);
  return it->second;
}

void GPT2BPETokenizer::load_vocab(const std::string& vocab_file) {
  const std::string text = read_file(vocab_file, "GPT-2 vocab file (--vocab-file / data.vocab_file)");
  nlohmann::json vocab;
  try {
    vocab = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    TESSERA_CONFIG_FAIL("GPT-2 vocab file '", vocab_file, "' is not valid JSON: ", e.what());
  }
  if (!vocab.is_object()) {
    TESSERA_CONFIG_FAIL("GPT-2 vocab file '", vocab_file,
                        "' must hold one JSON object mapping token -> id");
  }
  std::array<int, 512> byte_of_char{};
  byte_of_char.fill(-1);
  const auto byte_chars = bytes_to_unicode();
  for (int b = 0; b < 256; ++b) byte_of_char[byte_chars[b]] = b;

  constexpr int64_t kMaxId = int64_t{1} << 26;
  for (const auto& [token, value] : vocab.items()) {
    if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() >= kMaxId) {
      TESSERA_CONFIG_FAIL("GPT-2 vocab file '", vocab_file, "': the id of token '", token,
                          "' must be an integer in [0, ", kMaxId, "), got ", value.dump());
    }
    const auto id = static_cast<int32_t>(value.get<int64_t>());
    symbol_by_token_[token] = static_cast<int32_t>(symbol_id_.size());
    symbol_id_.push_back(id);
    if (static_cast<size_t>(id) >= id_bytes_.size()) {
      id_bytes_.resize(static_cast<size_t>(id) + 1);
      id_known_.resize(static_cast<size_t>(id) + 1, false);
    }
    // The raw bytes of a token: invert bytes_to_unicode; a character outside that alphabet (an
    // added special token) keeps its own UTF-8 bytes.
    std::string bytes;
    size_t pos = 0;
    while (pos < token.size()) {
      const size_t start = pos;
      const char32_t cp = unicode::next_code_point(token, pos);
      if (cp < byte_of_char.size() && byte_of_char[cp] >= 0) {
        bytes.push_back(static_cast<char>(byte_of_char[cp]));
      } else {
        bytes.append(token, start, pos - start);
      }
    }
    id_bytes_[static_cast<size_t>(id)] = std::move(bytes);
    id_known_[static_cast<size_t>(id)] = true;
  }
  vocab_size_ = static_cast<int64_t>(vocab.size());
  const auto eod = symbol_by_token_.find("<|endoftext|>");
  if (eod == symbol_by_token_.end()) {
    TESSERA_CONFIG_FAIL("GPT-2 vocab file '", vocab_file,
                        "' has no \"<|endoftext|>\" entry (the end-of-document token)");
  }
  eod_id_ = symbol_id_[static_cast<size_t>(eod->second)];
}

void GPT2BPETokenizer::load_merges(const std::string& merge_file) {
  const std::string text = read_file(merge_file, "GPT-2 merge file (--merge-file / data.merge_file)");
  std::vector<std::string_view> lines;
  size_t begin = 0;
  while (true) {
    const size_t newline = text.find('\n', begin);
    if (newline == std::string::npos) {
      lines.emplace_back(text.data() + begin, text.size() - begin);
      break;
    }
    lines.emplace_back(text.data() + begin, newline - begin);
    begin = newline + 1;
  }
  if (lines.empty() || lines.front().substr(0, 8) != "#version") {
    log::warn("GPT-2 merge file '", merge_file, "' does not start with a '#version' line; its first "
              "line is skipped all the same, as Megatron does");
  }
  // Megatron: open(...).read().split('\n')[1:-1]; a merge's rank is its index in that list.
  std::vector<std::pair<uint64_t, Merge>> entries;
  const size_t count = lines.size() >= 2 ? lines.size() - 2 : 0;
  entries.reserve(count);
  for (size_t rank = 0; rank < count; ++rank) {
    const auto fields = split_ascii_whitespace(lines[rank + 1]);
    if (fields.empty()) continue;
    if (fields.size() != 2) {
      TESSERA_CONFIG_FAIL("GPT-2 merge file '", merge_file, "' line ", rank + 2,
                          ": expected two space-separated tokens, got '", lines[rank + 1], "'");
    }
    const std::string left(fields[0]);
    const std::string right(fields[1]);
    const int32_t left_symbol = symbol_of(left);
    const int32_t right_symbol = symbol_of(right);
    const int32_t merged_symbol = symbol_of(left + right);
    const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(left_symbol)) << 32) |
                         static_cast<uint32_t>(right_symbol);
    entries.emplace_back(key, Merge{static_cast<int32_t>(rank), merged_symbol});
  }
  merges_.build(entries);
}

// ---- BPE -------------------------------------------------------------------------------------

void GPT2BPETokenizer::bytes_to_symbols(std::string_view bytes, std::vector<int32_t>& symbols) const {
  symbols.resize(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) symbols[i] = byte_symbol_[static_cast<unsigned char>(bytes[i])];
}

void GPT2BPETokenizer::merge_by_scan(std::vector<int32_t>& symbols) const {
  while (symbols.size() > 1) {
    const Merge* best = nullptr;
    int32_t best_left = 0;
    int32_t best_right = 0;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      const Merge* merge = merges_.find(symbols[i], symbols[i + 1]);
      if (merge != nullptr && (best == nullptr || merge->rank < best->rank)) {
        best = merge;
        best_left = symbols[i];
        best_right = symbols[i + 1];
      }
    }
    if (best == nullptr) return;
    size_t write = 0;
    for (size_t read = 0; read < symbols.size();) {
      if (read + 1 < symbols.size() && symbols[read] == best_left && symbols[read + 1] == best_right) {
        symbols[write++] = best->merged_symbol;
        read += 2;
      } else {
        symbols[write++] = symbols[read++];
      }
    }
    symbols.resize(write);
  }
}

void GPT2BPETokenizer::merge_by_heap(std::vector<int32_t>& symbols) const {
  const auto n = static_cast<int32_t>(symbols.size());
  if (n < 2) return;
  struct Candidate {
    int32_t rank;
    int32_t left;  // position of the pair's left symbol (original index: keeps left-to-right order)
    int32_t left_symbol;
    int32_t right_symbol;
    int32_t merged_symbol;
    bool operator>(const Candidate& other) const {
      return rank != other.rank ? rank > other.rank : left > other.left;
    }
  };
  std::vector<int32_t> prev(static_cast<size_t>(n));
  std::vector<int32_t> next(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    prev[static_cast<size_t>(i)] = i - 1;
    next[static_cast<size_t>(i)] = i + 1 < n ? i + 1 : -1;
  }
  std::vector<int32_t>& sym = symbols;  // sym[i] == -1: position i was merged into its left
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  const auto push_pair = [&](int32_t left) {
    const int32_t right = next[static_cast<size_t>(left)];
    if (left < 0 || right < 0) return;
    const int32_t a = sym[static_cast<size_t>(left)];
    const int32_t b = sym[static_cast<size_t>(right)];
    if (const Merge* merge = merges_.find(a, b)) queue.push({merge->rank, left, a, b, merge->merged_symbol});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push_pair(i);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    const auto left = static_cast<size_t>(c.left);
    if (sym[left] != c.left_symbol) continue;  // merged away or changed since it was queued
    const int32_t right = next[left];
    if (right < 0 || sym[static_cast<size_t>(right)] != c.right_symbol) continue;
    sym[left] = c.merged_symbol;
    sym[static_cast<size_t>(right)] = -1;
    const int32_t after = next[static_cast<size_t>(right)];
    next[left] = after;
    if (after >= 0) prev[static_cast<size_t>(after)] = c.left;
    if (prev[left] >= 0) push_pair(prev[left]);
    push_pair(c.left);
  }
  size_t write = 0;
  for (int32_t i = 0; i >= 0; i = next[static_cast<size_t>(i)]) sym[write++] = sym[static_cast<size_t>(i)];
  symbols.resize(write);
}

std::vector<int32_t> GPT2BPETokenizer::bpe_by_scan(std::string_view bytes) const {
  std::vector<int32_t> symbols;
  bytes_to_symbols(bytes, symbols);
  merge_by_scan(symbols);
  for (int32_t& s : symbols) s = symbol_id_[static_cast<size_t>(s)];
  return symbols;
}

std::vector<int32_t> GPT2BPETokenizer::bpe_by_heap(std::string_view bytes) const {
  std::vector<int32_t> symbols;
  bytes_to_symbols(bytes, symbols);
  merge_by_heap(symbols);
  for (int32_t& s : symbols) s = symbol_id_[static_cast<size_t>(s)];
  return symbols;
}

void GPT2BPETokenizer::encode_pretoken(std::string_view bytes, std::vector<int32_t>& out,
                                       std::vector<int32_t>& scratch) const {
  if (bytes.size() == 1) {
    out.push_back(symbol_id_[static_cast<size_t>(byte_symbol_[static_cast<unsigned char>(bytes[0])])]);
    return;
  }
  // Pre-tokens too long for the cache (rare in prose) are merged every time.
  if (cache_.append_cached(bytes, out)) return;
  const size_t first = out.size();
  if (shared_cache_ && shared_cache_->append_cached(bytes, out)) {
    cache_.insert(bytes, std::span<const int32_t>(out.data() + first, out.size() - first));
    return;
  }
  bytes_to_symbols(bytes, scratch);
  if (scratch.size() <= kMaxScanSymbols) {
    merge_by_scan(scratch);
  } else {
    merge_by_heap(scratch);
  }
  for (int32_t& s : scratch) s = symbol_id_[static_cast<size_t>(s)];
  cache_.insert(bytes, scratch);
  if (shared_cache_) shared_cache_->insert(bytes, scratch);
  out.insert(out.end(), scratch.begin(), scratch.end());
}

std::shared_ptr<BpeCache> GPT2BPETokenizer::make_shared_cache() {
  return std::make_shared<BpeCache>(kCacheSlotsPerShard);
}

std::vector<int32_t> GPT2BPETokenizer::tokenize(std::string_view text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 4 + 1);
  std::vector<int32_t> scratch;
  size_t begin = 0;
  while (begin < text.size()) {
    const size_t end = gpt2_pretoken_end(text, begin);
    encode_pretoken(text.substr(begin, end - begin), ids, scratch);
    begin = end;
  }
  return ids;
}

// ---- decoding --------------------------------------------------------------------------------

int32_t GPT2BPETokenizer::token_to_id(std::string_view token) const {
  const auto found = symbol_by_token_.find(std::string(token));
  if (found == symbol_by_token_.end()) return -1;
  const auto symbol = static_cast<size_t>(found->second);
  // Symbols past the vocab.json keys (bytes or merge results missing from it) have no id.
  const int32_t id = symbol_id_[symbol];
  if (id < 0 || static_cast<size_t>(id) >= id_known_.size() || !id_known_[static_cast<size_t>(id)]) return -1;
  return symbol < static_cast<size_t>(vocab_size_) ? id : -1;
}

const std::string& GPT2BPETokenizer::id_to_bytes(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_known_.size() || !id_known_[static_cast<size_t>(id)]) {
    TESSERA_FAIL("GPT2BPETokenizer: token id ", id, " is not in the vocabulary (ids of vocab.json: 0..",
                 static_cast<int64_t>(id_known_.size()) - 1, ")");
  }
  return id_bytes_[static_cast<size_t>(id)];
}

std::string GPT2BPETokenizer::detokenize(std::span<const int32_t> ids) const {
  std::string bytes;
  bytes.reserve(ids.size() * 4);
  for (const int32_t id : ids) bytes += id_to_bytes(id);
  return unicode::replace_invalid_utf8(bytes);
}

}  // namespace tessera::data
