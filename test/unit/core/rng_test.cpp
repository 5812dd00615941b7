// Philox4x32-10 against the Random123 known-answer vectors (tests/kat_vectors), RandomStream
// determinism and independence, rough uniform/normal/below statistics, and stream-id hashing.
#include "tessera/core/rng.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace tessera {
namespace {

// Random123 words: counter c0..c3, key k0, k1. Tessera packs key = k0 | k1 << 32,
// counter_low = c0 | c1 << 32, counter_high = c2 | c3 << 32.
std::array<uint32_t, 4> philox_words(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  const uint64_t key = uint64_t(k[0]) | uint64_t(k[1]) << 32;
  return philox4x32(key, uint64_t(c[2]) | uint64_t(c[3]) << 32, uint64_t(c[0]) | uint64_t(c[1]) << 32);
}

TEST(CoreRng, PhiloxMatchesRandom123KnownAnswers) {
  using W = std::array<uint32_t, 4>;
  EXPECT_EQ(philox_words({0, 0, 0, 0}, {0, 0}), (W{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(philox_words({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu}),
            (W{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  EXPECT_EQ(philox_words({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u}),
            (W{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

TEST(CoreRng, StreamsAreDeterministicAndIndependent) {
  const RandomStream a(1234, stream_id("layers.0.weight")), same(1234, stream_id("layers.0.weight"));
  const RandomStream other_stream(1234, stream_id("layers.1.weight")), other_seed(1235, stream_id("layers.0.weight"));
  int equal_stream = 0, equal_seed = 0;
  for (uint64_t i = 0; i < 1000; ++i) {
    ASSERT_EQ(a.bits(i), same.bits(i));
    ASSERT_EQ(a.normal(i), same.normal(i));
    equal_stream += a.bits(i) == other_stream.bits(i);
    equal_seed += a.bits(i) == other_seed.bits(i);
  }
  EXPECT_LE(equal_stream, 1);
  EXPECT_LE(equal_seed, 1);
  // Element i does not depend on which other elements were drawn.
  EXPECT_EQ(a.uniform(987654321), RandomStream(1234, stream_id("layers.0.weight")).uniform(987654321));
  EXPECT_NE(mix_stream(1, 2), mix_stream(1, 3));
  EXPECT_EQ(mix_stream(1, 2), mix_stream(1, 2));
}

// The dropout draw: index i takes word i % 4 of Philox block i / 4 (four decisions per evaluation),
// 24 bits of it; every word of a block is used once, and the draws look uniform.
TEST(CoreRng, UniformOfQuarterUsesEveryWordOfABlock) {
  const RandomStream rng(99, 5);
  for (uint64_t block : {uint64_t(0), uint64_t(1), uint64_t(123456789)}) {
    const auto words = philox4x32(99, 5, block);
    for (uint64_t w = 0; w < 4; ++w)
      EXPECT_EQ(rng.uniform_of_quarter(4 * block + w), static_cast<float>(words[w] >> 8) / 16777216.0f)
          << block << " " << w;
  }
  const int n = 100000;
  double sum = 0, sq = 0;
  int kept = 0;
  for (int i = 0; i < n; ++i) {
    const float u = rng.uniform_of_quarter(i);
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    sum += u;
    sq += double(u) * u;
    kept += u >= 0.1f;
  }
  EXPECT_NEAR(sum / n, 0.5, 0.005);
  EXPECT_NEAR(sq / n - (sum / n) * (sum / n), 1.0 / 12.0, 0.002);
  EXPECT_NEAR(kept / double(n), 0.9, 0.005);
}

TEST(CoreRng, UniformAndNormalStatistics) {
  const RandomStream rng(42, 7);
  const int n = 100000;
  double u_sum = 0, u_sq = 0, n_sum = 0, n_sq = 0, d_sum = 0;
  int below_counts[5] = {};
  for (int i = 0; i < n; ++i) {
    const float u = rng.uniform(i);
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    u_sum += u;
    u_sq += double(u) * u;
    const double d = rng.uniform_double(i);
    ASSERT_GE(d, 0.0);
    ASSERT_LT(d, 1.0);
    d_sum += d;
    const float z = rng.normal(i);
    ASSERT_TRUE(std::isfinite(z));
    n_sum += z;
    n_sq += double(z) * z;
    const uint64_t k = rng.below(i, 5);
    ASSERT_LT(k, 5u);
    ++below_counts[k];
  }
  EXPECT_NEAR(u_sum / n, 0.5, 0.005);
  EXPECT_NEAR(u_sq / n - std::pow(u_sum / n, 2), 1.0 / 12, 0.003);
  EXPECT_NEAR(d_sum / n, 0.5, 0.005);
  EXPECT_NEAR(n_sum / n, 0.0, 0.015);
  EXPECT_NEAR(n_sq / n, 1.0, 0.02);
  for (int c : below_counts) EXPECT_NEAR(c, n / 5, n / 50);
}

TEST(CoreRng, StreamIdIsFnv1a64) {
  EXPECT_EQ(stream_id(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(stream_id("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(stream_id("foobar"), 0x85944171f73967e8ull);
}

}  // namespace
}  // namespace tessera
