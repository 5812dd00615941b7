// Tensor views (view, rows, dim, describe) and their errors; Buffer views; dtype names.
#include "tessera/core/tensor.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "tessera/core/buffer.h"

namespace tessera {
namespace {

std::string error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(CoreTensor, ViewsAndRows) {
  Buffer buffer(6 * sizeof(float));
  Tensor t = buffer.as_tensor(DType::f32, {2, 3});
  for (int i = 0; i < 6; ++i) t.data_as<float>()[i] = float(i);
  EXPECT_EQ(t.describe(), "f32[2, 3] on cpu");
  EXPECT_EQ(t.dim(-1), 3);
  EXPECT_EQ(t.nbytes(), 24u);
  Tensor v = t.view({3, 2});
  EXPECT_EQ(v.data(), t.data());
  EXPECT_EQ(v.shape(), (Shape{3, 2}));
  Tensor row = t.rows(1, 2);
  EXPECT_EQ(row.shape(), (Shape{1, 3}));
  EXPECT_EQ(row.data_as<float>()[0], 3.0f);
  EXPECT_EQ(t.rows(2, 2).numel(), 0);
  EXPECT_EQ(t.flat().shape(), (Shape{6}));
  EXPECT_FALSE(Tensor().defined());
  EXPECT_TRUE(t.defined());
}

TEST(CoreTensor, ErrorsDescribeTheTensor) {
  Buffer buffer(6 * sizeof(float));
  Tensor t = buffer.as_tensor(DType::f32, {2, 3});
  EXPECT_NE(error_of([&] { t.view({4, 2}); }).find("cannot view f32[2, 3] on cpu as [4, 2]"), std::string::npos);
  EXPECT_NE(error_of([&] { t.rows(1, 3); }).find("rows [1, 3) out of range for f32[2, 3]"), std::string::npos);
  EXPECT_NE(error_of([&] { t.rows(2, 1); }).find("out of range"), std::string::npos);
  EXPECT_NE(error_of([&] { t.dim(2); }).find("axis 2 out of range"), std::string::npos);
  EXPECT_NE(error_of([&] { t.data_as<double>(); }).find("read as f64"), std::string::npos);
  EXPECT_NE(error_of([&] { expect_tensor(t, DType::f32, {3, 2}, "weight"); })
                .find("weight: expected f32[3, 2], got f32[2, 3] on cpu"),
            std::string::npos);
  EXPECT_NE(error_of([&] { buffer.as_tensor(DType::f64, {4}); }).find("exceeds buffer"), std::string::npos);
  EXPECT_NE(error_of([&] { Tensor(nullptr, DType::f32, {2, -1}); }).find("negative dimension"), std::string::npos);
  // The location is carried separately from the message.
  try {
    t.view({5});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(e.location().find("tensor.cpp:"), std::string::npos);
    EXPECT_EQ(e.exit_code(), 1);
  }
}

TEST(CoreDType, NamesAndSizes) {
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::f64), 8u);
  EXPECT_EQ(dtype_from_name("f16"), DType::f16);
  EXPECT_EQ(dtype_of<double>(), DType::f64);
  try {
    dtype_from_name("float32");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_NE(std::string(e.what()).find("allowed: f32"), std::string::npos);
  }
}

TEST(CoreArena, PeakResetAndZeroFill) {
  Arena arena(1024);
  Tensor a = arena.allocate(DType::f32, {10});  // 40 bytes, rounded to 256
  EXPECT_EQ(arena.used_bytes(), 256u);
  for (int i = 0; i < 10; ++i) a.data_as<float>()[i] = 5.0f;
  Tensor b = arena.allocate(DType::f64, {64});  // 512 bytes
  EXPECT_EQ(arena.used_bytes(), 768u);
  EXPECT_NE(a.data(), b.data());
  EXPECT_EQ(arena.peak_bytes(), 768u);
  arena.reset();
  EXPECT_EQ(arena.used_bytes(), 0u);
  EXPECT_EQ(arena.peak_bytes(), 768u);
  Tensor again = arena.allocate(DType::f32, {10});
  EXPECT_EQ(again.data(), a.data());  // memory is reused after reset ...
  for (int i = 0; i < 10; ++i) EXPECT_EQ(again.data_as<float>()[i], 0.0f);  // ... and zero-filled
  // A request larger than a block gets its own block; the abandoned tail counts as used.
  Tensor big = arena.allocate(DType::f32, {1000});
  EXPECT_EQ(big.numel(), 1000);
  EXPECT_EQ(arena.used_bytes(), 1024u + 4096u);
  EXPECT_EQ(arena.peak_bytes(), 1024u + 4096u);
  arena.reset();
  Tensor small = arena.allocate(DType::u8, {1});
  EXPECT_EQ(arena.used_bytes(), 256u);
  EXPECT_EQ(arena.peak_bytes(), 1024u + 4096u);
  EXPECT_EQ(small.data(), a.data());
}

TEST(CoreArena, FirstBlockSizeAndConsolidation) {
  // 1000-byte allocations (1024 in the arena) in 1500-byte blocks: each block's tail is abandoned.
  Arena spilling(1500);
  for (int i = 0; i < 3; ++i) spilling.allocate(DType::u8, {1000});
  EXPECT_EQ(spilling.used_bytes(), 1500u * 2 + 1024u);  // two tails of 476 bytes abandoned
  // consolidate(): one block of the cycle's peak; the same allocations then fit in it, in order.
  spilling.consolidate();
  EXPECT_EQ(spilling.used_bytes(), 0u);
  const Tensor first = spilling.allocate(DType::u8, {1000});
  const Tensor second = spilling.allocate(DType::u8, {1000});
  spilling.allocate(DType::u8, {1000});
  EXPECT_EQ(spilling.used_bytes(), 3u * 1024u);  // no tail abandoned
  EXPECT_EQ(static_cast<const char*>(second.data()) - static_cast<const char*>(first.data()), 1024);
  // A first block sized for the cycle: nothing abandoned from the start; later blocks block_bytes.
  Arena sized(1500, Device::cpu(), 3 * 1024);
  for (int i = 0; i < 3; ++i) sized.allocate(DType::u8, {1000});
  EXPECT_EQ(sized.used_bytes(), 3u * 1024u);
  sized.allocate(DType::u8, {1000});  // spills into a 1500-byte block
  EXPECT_EQ(sized.used_bytes(), 4u * 1024u);
  sized.allocate(DType::u8, {1000});  // the 476-byte tail is abandoned: the block was block_bytes, not 3 KiB
  EXPECT_EQ(sized.used_bytes(), 4u * 1024u + 476u + 1024u);
}

}  // namespace
}  // namespace tessera
