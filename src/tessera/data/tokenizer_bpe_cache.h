// A thread-safe cache from a pre-token's bytes to its BPE token ids: mutex-protected shards of
// flat, cache-line-sized slots (key and ids inline), so a hit costs one lock and about one miss.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <string_view>
#include <vector>

namespace tessera::data {

class BpeCache {
 public:
  static constexpr size_t kMaxKeyBytes = 22;  // longer pre-tokens are not cached
  static constexpr size_t kMaxIds = 8;        // nor pre-tokens of more ids

  // max_slots_per_shard (a power of two) bounds memory: 64 shards x slots x 64 bytes. A shard
  // starts small and doubles while half full; at its maximum, a full probe window evicts its
  // first slot, so the cache never needs clearing.
  explicit BpeCache(size_t max_slots_per_shard);

  static bool cacheable(std::string_view key, size_t id_count) {
    return key.size() <= kMaxKeyBytes && id_count <= kMaxIds;
  }
  // Appends the ids cached for `key` to `out` and returns true; returns false on a miss.
  bool append_cached(std::string_view key, std::vector<int32_t>& out) const;
  // Stores the ids of `key` if cacheable(key, ids.size()); otherwise does nothing.
  void insert(std::string_view key, std::span<const int32_t> ids);
  size_t size() const;  // occupied slots over all shards
  void clear();

 private:
  struct Slot {
    uint64_t tag;  // hash | 1; 0 marks an empty slot
    uint8_t key_length;
    uint8_t id_count;
    char key[kMaxKeyBytes];
    int32_t ids[kMaxIds];
  };
  static_assert(sizeof(Slot) == 64, "one slot per cache line");
  struct alignas(64) Shard {
    mutable std::mutex mutex;
    std::vector<Slot> slots;  // allocated on the first insert
    size_t used = 0;
  };
  static void grow(Shard& shard, size_t new_size);
  static constexpr size_t kShards = 64;
  static constexpr size_t kProbes = 8;
  static constexpr size_t kInitialSlots = 256;

  size_t max_slots_per_shard_;
  std::array<Shard, kShards> shards_;
};

}  // namespace tessera::data
