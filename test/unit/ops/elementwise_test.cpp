// Elementwise helpers: add, add_inplace, scale, fill, converting copy (f32/f64/bf16/f16), sum of squares.
#include "tessera/ops/elementwise.h"

#include "op_test_util.h"

namespace tessera {
namespace {

using test::OwnedTensor;

TEST(OpsElementwise, AddAccumulateScaleFill) {
  OwnedTensor a(DType::f32, {2, 3}), b(DType::f32, {2, 3}), out(DType::f32, {2, 3});
  for (int i = 0; i < 6; ++i) a.at<float>(i) = float(i), b.at<float>(i) = float(10 * i);
  ops::add(a, b, out);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(out.at<float>(i), 11.0f * i);
  ops::add_inplace(out, a);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(out.at<float>(i), 12.0f * i);
  ops::scale_inplace(out, 0.5);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(out.at<float>(i), 6.0f * i);
  ops::fill(out, -1.5);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(out.at<float>(i), -1.5f);
  OwnedTensor mask(DType::u8, {4});
  ops::fill(mask, 1);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(mask.at<uint8_t>(i), 1);
  OwnedTensor d(DType::f64, {2, 3});
  test::expect_error_containing([&] { ops::add(a, b, d); }, {"add", "out must have the dtype of a"});
  OwnedTensor wrong(DType::f32, {3, 2});
  test::expect_error_containing([&] { ops::add_inplace(out, wrong); }, {"src must have the shape of dst"});
}

TEST(OpsElementwise, ConvertingCopyRoundsToHalfTypes) {
  OwnedTensor src(DType::f32, {4}), as_bf16(DType::bf16, {4}), as_f16(DType::f16, {4}), back(DType::f64, {4});
  const float values[] = {1.0f, 3.14159265f, -65504.0f, 1e-6f};
  for (int i = 0; i < 4; ++i) src.at<float>(i) = values[i];
  ops::copy(src, as_bf16);
  ops::copy(src, as_f16);
  EXPECT_EQ(as_bf16.at<bf16>(0).bits, 0x3f80);
  EXPECT_EQ(as_bf16.at<bf16>(1).bits, 0x4049);
  EXPECT_EQ(as_f16.at<f16>(0).bits, 0x3c00);
  EXPECT_EQ(as_f16.at<f16>(2).bits, 0xfbff);
  ops::copy(as_f16, back);
  EXPECT_EQ(back.at<double>(2), -65504.0);
  EXPECT_NEAR(back.at<double>(3), 1e-6, 6e-8);  // f16 subnormal, spacing 2^-24
  OwnedTensor same(DType::f32, {4});
  ops::copy(src, same);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(same.at<float>(i), values[i]);
  OwnedTensor ints(DType::i32, {4});
  test::expect_error_containing([&] { ops::copy(src, ints); }, {"copy", "dst (converting copy) must be a float"});
}

TEST(OpsElementwise, SumOfSquaresInDouble) {
  OwnedTensor t(DType::f32, {3}), h(DType::bf16, {2});
  t.at<float>(0) = 1, t.at<float>(1) = -2, t.at<float>(2) = 0.5f;
  EXPECT_DOUBLE_EQ(ops::sum_of_squares(t), 5.25);
  h.at<bf16>(0) = float_to_bf16(3.0f);
  h.at<bf16>(1) = float_to_bf16(4.0f);
  EXPECT_DOUBLE_EQ(ops::sum_of_squares(h), 25.0);
}

}  // namespace
}  // namespace tessera
