// BpeCache: hits return exactly what was stored, long keys / many ids are not cached, full probe
// windows evict instead of failing, and concurrent inserts and lookups stay consistent.
#include <gtest/gtest.h>

#include <string>
#include <thread>

#include "tessera/data/tokenizer_bpe_cache.h"

namespace tessera::data {
namespace {

using Ids = std::vector<int32_t>;

TEST(BpeCache, StoresAndReturnsIds) {
  BpeCache cache(256);
  Ids out = {7};
  EXPECT_FALSE(cache.append_cached("hello", out));
  cache.insert("hello", Ids{31373});
  cache.insert(" world", Ids{995});
  cache.insert("", Ids{});
  EXPECT_TRUE(cache.append_cached("hello", out));
  EXPECT_TRUE(cache.append_cached(" world", out));
  EXPECT_EQ(out, (Ids{7, 31373, 995}));
  EXPECT_FALSE(cache.append_cached("hello!", out));
  EXPECT_EQ(cache.size(), 3u);
  cache.insert("hello", Ids{1, 2});  // a second insert replaces the entry
  out.clear();
  EXPECT_TRUE(cache.append_cached("hello", out));
  EXPECT_EQ(out, (Ids{1, 2}));
  cache.clear();
  EXPECT_EQ(cache.size(), 0u);
  EXPECT_FALSE(cache.append_cached("hello", out));
}

TEST(BpeCache, SkipsWhatDoesNotFitASlot) {
  BpeCache cache(256);
  const std::string long_key(BpeCache::kMaxKeyBytes + 1, 'x');
  cache.insert(long_key, Ids{1});
  cache.insert("many", Ids(BpeCache::kMaxIds + 1, 5));
  Ids out;
  EXPECT_FALSE(cache.append_cached(long_key, out));
  EXPECT_FALSE(cache.append_cached("many", out));
  cache.insert(std::string(BpeCache::kMaxKeyBytes, 'y'), Ids(BpeCache::kMaxIds, 9));
  EXPECT_TRUE(cache.append_cached(std::string(BpeCache::kMaxKeyBytes, 'y'), out));
  EXPECT_EQ(out, Ids(BpeCache::kMaxIds, 9));
}

TEST(BpeCache, EvictsWhenFullAndNeverReturnsWrongIds) {
  BpeCache cache(256);  // 64 shards x 256 slots: 40000 keys must evict
  for (int i = 0; i < 40000; ++i) cache.insert("k" + std::to_string(i), Ids{i, -i});
  EXPECT_LE(cache.size(), 64u * 256u);
  int hits = 0;
  for (int i = 0; i < 40000; ++i) {
    Ids out;
    if (cache.append_cached("k" + std::to_string(i), out)) {
      ++hits;
      ASSERT_EQ(out, (Ids{i, -i}));
    }
  }
  EXPECT_GT(hits, 0);
}

TEST(BpeCache, ConcurrentUseIsConsistent) {
  BpeCache cache(256);
  std::vector<std::thread> threads;
  std::vector<int> wrong(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20000; ++round) {
        const int i = (round * 7 + t) % 5000;
        const std::string key = "w" + std::to_string(i);
        Ids out;
        if (cache.append_cached(key, out)) {
          if (out != Ids{i, i + 1, i + 2}) ++wrong[static_cast<size_t>(t)];
        } else {
          cache.insert(key, Ids{i, i + 1, i + 2});
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(wrong, (std::vector<int>(4, 0)));
}

}  // namespace
}  // namespace tessera::data
