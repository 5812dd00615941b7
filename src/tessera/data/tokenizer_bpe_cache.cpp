// The sharded pre-token -> ids cache of the BPE tokenizer: the key's hash picks the shard (top
// bits) and the first slot (low bits); lookups probe a short window of slots under the shard lock.
#include "tessera/data/tokenizer_bpe_cache.h"

#include <algorithm>
#include <cstring>
#include <functional>

#include "tessera/core/error.h"

namespace tessera::data {
namespace {

uint64_t hash_of(std::string_view key) { return std::hash<std::string_view>{}(key) | 1; }

bool slot_holds(const void* slot_key, size_t slot_length, std::string_view key) {
  return slot_length == key.size() && std::memcmp(slot_key, key.data(), key.size()) == 0;
}

}  // namespace

BpeCache::BpeCache(size_t max_slots_per_shard) : max_slots_per_shard_(max_slots_per_shard) {
  TESSERA_CHECK(max_slots_per_shard >= kInitialSlots && (max_slots_per_shard & (max_slots_per_shard - 1)) == 0,
                "BpeCache max_slots_per_shard must be a power of two >= ", kInitialSlots, ", got ",
                max_slots_per_shard);
}

bool BpeCache::append_cached(std::string_view key, std::vector<int32_t>& out) const {
  if (key.size() > kMaxKeyBytes) return false;
  const uint64_t tag = hash_of(key);
  const Shard& shard = shards_[tag >> 58];
  std::lock_guard<std::mutex> lock(shard.mutex);
  if (shard.slots.empty()) return false;
  const size_t mask = shard.slots.size() - 1;
  for (size_t probe = 0; probe < kProbes; ++probe) {
    const Slot& slot = shard.slots[(tag + probe) & mask];
    if (slot.tag == 0) return false;
    if (slot.tag == tag && slot_holds(slot.key, slot.key_length, key)) {
      out.insert(out.end(), slot.ids, slot.ids + slot.id_count);
      return true;
    }
  }
  return false;
}

void BpeCache::grow(Shard& shard, size_t new_size) {
  std::vector<Slot> old = std::move(shard.slots);
  shard.slots.assign(new_size, Slot{});
  shard.used = 0;
  const size_t mask = new_size - 1;
  for (const Slot& slot : old) {
    if (slot.tag == 0) continue;
    for (size_t probe = 0; probe < kProbes; ++probe) {
      Slot& target = shard.slots[(slot.tag + probe) & mask];
      if (target.tag == 0) {
        target = slot;
        ++shard.used;
        break;
      }
    }  // an entry whose window is full in the larger table is dropped (it is only a cache)
  }
}

void BpeCache::insert(std::string_view key, std::span<const int32_t> ids) {
  if (!cacheable(key, ids.size())) return;
  const uint64_t tag = hash_of(key);
  Shard& shard = shards_[tag >> 58];
  std::lock_guard<std::mutex> lock(shard.mutex);
  if (shard.slots.empty()) {
    shard.slots.assign(kInitialSlots, Slot{});
    shard.used = 0;
  } else if (shard.used * 2 >= shard.slots.size() && shard.slots.size() < max_slots_per_shard_) {
    grow(shard, shard.slots.size() * 2);
  }
  const size_t mask = shard.slots.size() - 1;
  Slot* target = &shard.slots[tag & mask];  // evicted if the whole window is taken
  for (size_t probe = 0; probe < kProbes; ++probe) {
    Slot& slot = shard.slots[(tag + probe) & mask];
    if (slot.tag == 0) {
      target = &slot;
      ++shard.used;
      break;
    }
    if (slot.tag == tag && slot_holds(slot.key, slot.key_length, key)) {
      target = &slot;
      break;
    }
  }
  target->tag = tag;
  target->key_length = static_cast<uint8_t>(key.size());
  target->id_count = static_cast<uint8_t>(ids.size());
  std::memcpy(target->key, key.data(), key.size());
  std::copy(ids.begin(), ids.end(), target->ids);
}

size_t BpeCache::size() const {
  size_t total = 0;
  for (const Shard& shard : shards_) {
    std::lock_guard<std::mutex> lock(shard.mutex);
    for (const Slot& slot : shard.slots) total += slot.tag != 0 ? 1 : 0;
  }
  return total;
}

void BpeCache::clear() {
  for (Shard& shard : shards_) {
    std::lock_guard<std::mutex> lock(shard.mutex);
    shard.slots.clear();
    shard.slots.shrink_to_fit();
    shard.used = 0;
  }
}

}  // namespace tessera::data
