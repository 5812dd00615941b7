// Megatron's GPT2BPETokenizer: GPT-2 byte-level BPE from vocab.json + merges.txt (bytes_to_unicode
// mapping, GPT-2 pre-tokenizer, merges by rank, pre-token cache); thread-safe tokenize().
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tessera/data/tokenizer.h"
#include <memory>

#include "tessera/data/tokenizer_bpe_cache.h"

namespace tessera::data {

class GPT2BPETokenizer final : public Tokenizer {
 public:
  // Throws ConfigError naming the file (and line) if a file is missing or malformed.
  GPT2BPETokenizer(const std::string& vocab_file, const std::string& merge_file);

  std::vector<int32_t> tokenize(std::string_view text) const override;
  // Concatenates the tokens' bytes; ill-formed UTF-8 becomes U+FFFD (Megatron's errors='replace').
  // Throws Error for an id that is not in vocab.json.
  std::string detokenize(std::span<const int32_t> ids) const override;
  int64_t vocab_size() const override { return vocab_size_; }  // entries of vocab.json
  int32_t eod() const override { return eod_id_; }               // "<|endoftext|>"
  std::string_view type_name() const override { return "GPT2BPETokenizer"; }

  // The id of a vocab.json key (in its byte-to-unicode spelling, e.g. "\u0120the"), or -1.
  int32_t token_to_id(std::string_view token) const;
  // The raw bytes a token id stands for; throws Error for an unknown id.
  const std::string& id_to_bytes(int32_t id) const;

  // The BPE of one pre-token's bytes, uncached, by either merge algorithm (tests compare them):
  // by_scan repeats "find the lowest-rank pair, merge all its occurrences left to right" (the
  // reference algorithm); by_heap does the same merges in O(n log n) with a priority queue.
  std::vector<int32_t> bpe_by_scan(std::string_view bytes) const;
  std::vector<int32_t> bpe_by_heap(std::string_view bytes) const;
  size_t cache_entries() const { return cache_.size(); }
  // A second-level cache shared with other instances: each tessera-preprocess worker owns a
  // tokenizer (uncontended first-level lookups) and the workers share every pre-token's first BPE.
  void share_cache(std::shared_ptr<BpeCache> shared) { shared_cache_ = std::move(shared); }
  static std::shared_ptr<BpeCache> make_shared_cache();

 private:
  struct Merge {
    int32_t rank;
    int32_t merged_symbol;
  };
  // Open-addressing table from a pair of symbols to its merge (the hot lookup of BPE).
  class MergeTable {
   public:
    void build(const std::vector<std::pair<uint64_t, Merge>>& entries);
    const Merge* find(int32_t left, int32_t right) const;

   private:
    static uint64_t key(int32_t left, int32_t right) {
      return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
    }
    std::vector<uint64_t> keys_;
    std::vector<Merge> values_;
    uint64_t mask_ = 0;
  };

  int32_t symbol_of(const std::string& token);  // adds a symbol for a string outside vocab.json
  void load_vocab(const std::string& vocab_file);
  void load_merges(const std::string& merge_file);
  void bytes_to_symbols(std::string_view bytes, std::vector<int32_t>& symbols) const;
  void merge_by_scan(std::vector<int32_t>& symbols) const;
  void merge_by_heap(std::vector<int32_t>& symbols) const;
  void encode_pretoken(std::string_view bytes, std::vector<int32_t>& out,
                       std::vector<int32_t>& scratch) const;

  // Symbols are BPE's working alphabet: every vocab.json key, plus any byte or merge result that
  // is not a key (Megatron maps those to id 0, as encoder.get(token, 0) does).
  std::unordered_map<std::string, int32_t> symbol_by_token_;
  std::vector<int32_t> symbol_id_;      // symbol -> output id
  std::vector<std::string> id_bytes_;   // id -> raw bytes
  std::vector<bool> id_known_;
  int32_t byte_symbol_[256] = {};
  MergeTable merges_;
  int64_t vocab_size_ = 0;
  int32_t eod_id_ = -1;
  mutable BpeCache cache_;
  std::shared_ptr<BpeCache> shared_cache_;
};

}  // namespace tessera::data
