// bf16 and f16 conversions: known bit patterns, round-to-nearest-even ties, overflow to inf, NaN,
// f16 subnormals, and exact round trips of every 16-bit pattern.
#include "tessera/core/half.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

namespace tessera {
namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(CoreHalf, Bf16KnownPatternsAndRounding) {
  EXPECT_EQ(float_to_bf16(1.0f).bits, 0x3f80);
  EXPECT_EQ(float_to_bf16(-2.0f).bits, 0xc000);
  EXPECT_EQ(float_to_bf16(3.14159265f).bits, 0x4049);          // 0x40490fdb rounds down
  EXPECT_EQ(float_to_bf16(from_bits(0x3f808000u)).bits, 0x3f80);  // tie -> even (down)
  EXPECT_EQ(float_to_bf16(from_bits(0x3f818000u)).bits, 0x3f82);  // tie -> even (up)
  EXPECT_EQ(float_to_bf16(from_bits(0x3f808001u)).bits, 0x3f81);  // above the tie -> up
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::infinity()).bits, 0x7f80);
  EXPECT_EQ(float_to_bf16(-std::numeric_limits<float>::infinity()).bits, 0xff80);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()).bits, 0x7f80);  // rounds up to inf
  const uint16_t signalling = float_to_bf16(from_bits(0x7f800001u)).bits;    // low payload bits only
  EXPECT_TRUE(std::isnan(bf16_to_float(bf16{signalling}))) << std::hex << signalling;
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(bf16_to_float(bf16{0x3f80}), 1.0f);
  EXPECT_EQ(bf16_to_float(bf16{0x0001}), from_bits(0x00010000u));  // subnormal bf16 passes through
}

TEST(CoreHalf, Bf16RoundTripsEveryPattern) {
  for (uint32_t bits = 0; bits < 0x10000u; ++bits) {
    const float f = bf16_to_float(bf16{static_cast<uint16_t>(bits)});
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(f))));
      continue;
    }
    ASSERT_EQ(float_to_bf16(f).bits, bits);
  }
}

TEST(CoreHalf, F16KnownPatternsAndRounding) {
  EXPECT_EQ(float_to_f16(1.0f).bits, 0x3c00);
  EXPECT_EQ(float_to_f16(-2.0f).bits, 0xc000);
  EXPECT_EQ(float_to_f16(0.1f).bits, 0x2e66);
  EXPECT_EQ(float_to_f16(65504.0f).bits, 0x7bff);                  // largest finite
  EXPECT_EQ(float_to_f16(65519.0f).bits, 0x7bff);                  // below the tie
  EXPECT_EQ(float_to_f16(65520.0f).bits, 0x7c00);                  // tie to even = inf
  EXPECT_EQ(float_to_f16(1e6f).bits, 0x7c00);
  EXPECT_EQ(float_to_f16(-1e6f).bits, 0xfc00);
  EXPECT_EQ(float_to_f16(1.0f + std::ldexp(1.0f, -11)).bits, 0x3c00);      // tie -> even (down)
  EXPECT_EQ(float_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)).bits, 0x3c02);  // tie -> even (up)
  EXPECT_EQ(float_to_f16(std::numeric_limits<float>::infinity()).bits, 0x7c00);
  const uint16_t nan = float_to_f16(std::numeric_limits<float>::quiet_NaN()).bits;
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x03ff, 0);
  EXPECT_EQ(float_to_f16(-0.0f).bits, 0x8000);
}

TEST(CoreHalf, F16Subnormals) {
  const float tiny = std::ldexp(1.0f, -24);  // smallest f16 subnormal
  EXPECT_EQ(float_to_f16(tiny).bits, 0x0001);
  EXPECT_EQ(float_to_f16(std::ldexp(1.0f, -25)).bits, 0x0000);       // tie between 0 and 1 -> 0
  EXPECT_EQ(float_to_f16(3 * std::ldexp(1.0f, -25)).bits, 0x0002);   // tie between 1 and 2 -> 2
  EXPECT_EQ(float_to_f16(-5 * std::ldexp(1.0f, -25)).bits, 0x8002);  // tie between 2 and 3 -> 2
  EXPECT_EQ(float_to_f16(1023 * tiny).bits, 0x03ff);                 // largest subnormal
  EXPECT_EQ(float_to_f16(std::ldexp(1.0f, -14)).bits, 0x0400);       // smallest normal
  EXPECT_EQ(float_to_f16(1023.5f * tiny).bits, 0x0400);              // rounds up into the normals
  EXPECT_EQ(f16_to_float(f16{0x0001}), tiny);
  EXPECT_EQ(f16_to_float(f16{0x0200}), std::ldexp(1.0f, -15));
  EXPECT_EQ(f16_to_float(f16{0x03ff}), 1023 * tiny);
  EXPECT_EQ(f16_to_float(f16{0x7bff}), 65504.0f);
  EXPECT_TRUE(std::signbit(f16_to_float(f16{0x8000})));
  EXPECT_TRUE(std::isinf(f16_to_float(f16{0x7c00})));
  EXPECT_TRUE(std::isnan(f16_to_float(f16{0x7e00})));
}

TEST(CoreHalf, F16RoundTripsEveryPattern) {
  for (uint32_t bits = 0; bits < 0x10000u; ++bits) {
    const float f = f16_to_float(f16{static_cast<uint16_t>(bits)});
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16_to_float(float_to_f16(f))));
      continue;
    }
    ASSERT_EQ(float_to_f16(f).bits, bits) << std::hex << bits;
  }
}

}  // namespace
}  // namespace tessera
