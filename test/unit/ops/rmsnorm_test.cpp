// RMSNorm: forward against the direct formula, saved rstd, backward against finite differences
// (din, dweight), accumulate-vs-overwrite semantics, bf16 storage on the CPU and argument errors.
#include "tessera/ops/rmsnorm.h"

#include "op_test_util.h"
#include "tessera/core/half.h"

namespace tessera {
namespace {

using test::OwnedTensor;

TEST(OpsRmsNorm, ForwardMatchesFormula) {
  const int64_t rows = 4, hidden = 7;
  const double eps = 1e-5;
  OwnedTensor in(DType::f64, {rows, hidden}), weight(DType::f64, {hidden});
  test::fill_normal(in, 1, 3.0);
  test::fill_normal(weight, 2);
  in.at<double>(0) += 10.0;  // a row with a large offset (RMSNorm does not centre)
  OwnedTensor out(DType::f64, {rows, hidden}), rstd(DType::f64, {rows});
  ops::rmsnorm_forward(in, weight, eps, out, rstd);
  OwnedTensor in32(DType::f32, {rows, hidden}), weight32(DType::f32, {hidden});
  test::copy_to_f32(in, in32);
  test::copy_to_f32(weight, weight32);
  OwnedTensor out32(DType::f32, {rows, hidden}), rstd32(DType::f32, {rows});
  ops::rmsnorm_forward(in32, weight32, eps, out32, rstd32);
  for (int64_t r = 0; r < rows; ++r) {
    double ms = 0;
    for (int64_t j = 0; j < hidden; ++j) ms += std::pow(in.at<double>(r * hidden + j), 2) / hidden;
    const double s = 1 / std::sqrt(ms + eps);
    EXPECT_NEAR(rstd.at<double>(r), s, 1e-12);
    EXPECT_NEAR(rstd32.at<float>(r), s, 1e-6 * s);
    for (int64_t j = 0; j < hidden; ++j) {
      const double y = in.at<double>(r * hidden + j) * s * weight.at<double>(j);
      EXPECT_NEAR(out.at<double>(r * hidden + j), y, 1e-12);
      EXPECT_NEAR(out32.at<float>(r * hidden + j), y, 1e-5);
    }
  }
}

TEST(OpsRmsNorm, EpsIsUsedAsPassed) {
  // A zero row has mean square 0, so rstd = 1/sqrt(eps) exactly and the output is 0.
  OwnedTensor in(DType::f64, {1, 4}), weight(DType::f64, {4}), out(DType::f64, {1, 4}), rstd(DType::f64, {1});
  for (int j = 0; j < 4; ++j) weight.at<double>(j) = 1.0, out.at<double>(j) = 9.0;
  ops::rmsnorm_forward(in, weight, 0.25, out, rstd);
  EXPECT_DOUBLE_EQ(rstd.at<double>(0), 2.0);
  for (int j = 0; j < 4; ++j) EXPECT_EQ(out.at<double>(j), 0.0);
}

TEST(OpsRmsNorm, BackwardMatchesFiniteDifferencesAndAccumulates) {
  const int64_t s = 3, b = 2, hidden = 5;
  OwnedTensor in(DType::f64, {s, b, hidden}), weight(DType::f64, {hidden});
  OwnedTensor out(DType::f64, {s, b, hidden}), rstd(DType::f64, {s, b}), dout(DType::f64, {s, b, hidden});
  test::fill_normal(in, 11, 2.0);
  test::fill_normal(weight, 12);
  test::fill_normal(dout, 14);
  auto loss = [&] {
    ops::rmsnorm_forward(in, weight, 1e-5, out, rstd);
    return test::dot(out, dout);
  };
  loss();
  OwnedTensor din(DType::f64, {s, b, hidden}), dweight(DType::f64, {hidden});
  for (int64_t i = 0; i < din.numel(); ++i) din.at<double>(i) = 7.0;  // overwritten
  for (int64_t j = 0; j < hidden; ++j) dweight.at<double>(j) = 0.5;    // accumulated
  ops::rmsnorm_backward(dout, in, weight, rstd, din, dweight);
  auto dweight_only = test::values_of(dweight);
  for (auto& v : dweight_only) v -= 0.5;
  test::expect_gradient_matches(loss, in, test::values_of(din), "din");
  test::expect_gradient_matches(loss, weight, dweight_only, "dweight");
}

TEST(OpsRmsNorm, Bf16OnTheCpuComputesThroughF32) {
  const int64_t rows = 3, hidden = 8;
  OwnedTensor in(DType::f32, {rows, hidden}), weight(DType::f32, {hidden}), out(DType::f32, {rows, hidden}),
      rstd(DType::f32, {rows});
  test::fill_normal(in, 21);
  test::fill_normal(weight, 22);
  OwnedTensor in16(DType::bf16, {rows, hidden}), weight16(DType::bf16, {hidden}), out16(DType::bf16, {rows, hidden}),
      rstd16(DType::bf16, {rows});
  for (int64_t i = 0; i < in.numel(); ++i) {
    in16.at<bf16>(i) = float_to_bf16(in.at<float>(i));
    in.at<float>(i) = bf16_to_float(in16.at<bf16>(i));  // the same rounded inputs on both sides
  }
  for (int64_t j = 0; j < hidden; ++j) {
    weight16.at<bf16>(j) = float_to_bf16(weight.at<float>(j));
    weight.at<float>(j) = bf16_to_float(weight16.at<bf16>(j));
  }
  ops::rmsnorm_forward(in, weight, 1e-5, out, rstd);
  ops::rmsnorm_forward(in16, weight16, 1e-5, out16, rstd16);
  for (int64_t i = 0; i < out.numel(); ++i)
    EXPECT_EQ(bf16_to_float(out16.at<bf16>(i)), bf16_to_float(float_to_bf16(out.at<float>(i)))) << i;
}

TEST(OpsRmsNorm, ArgumentErrors) {
  OwnedTensor in(DType::f32, {2, 4}), weight(DType::f32, {4}), out(DType::f32, {2, 4}), rstd(DType::f32, {2});
  OwnedTensor bad_rstd(DType::f32, {3});
  test::expect_error_containing([&] { ops::rmsnorm_forward(in, weight, 1e-5, out, bad_rstd); },
                                {"rmsnorm_forward", "rstd must be [2]"});
  OwnedTensor bad_weight(DType::f32, {5});
  test::expect_error_containing([&] { ops::rmsnorm_forward(in, bad_weight, 1e-5, out, rstd); },
                                {"rmsnorm_forward", "in must be [..., 5]", "f32[2, 4]"});
  OwnedTensor f64_out(DType::f64, {2, 4});
  test::expect_error_containing([&] { ops::rmsnorm_forward(in, weight, 1e-5, f64_out, rstd); },
                                {"out must have the dtype of in (f32)", "f64[2, 4]"});
  test::expect_error_containing([&] { ops::rmsnorm_forward(in, weight, -1.0, out, rstd); }, {"eps must be >= 0"});
  OwnedTensor bad_dweight(DType::f32, {3});
  test::expect_error_containing([&] { ops::rmsnorm_backward(out, in, weight, rstd, out, bad_dweight); },
                                {"rmsnorm_backward", "dweight must have the shape of weight [4]", "f32[3]"});
  OwnedTensor i32_in(DType::i32, {2, 4}), i32_out(DType::i32, {2, 4}), i32_w(DType::i32, {4}), i32_r(DType::i32, {2});
  test::expect_error_containing([&] { ops::rmsnorm_forward(i32_in, i32_w, 1e-5, i32_out, i32_r); },
                                {"in must be f32 or f64"});
}

}  // namespace
}  // namespace tessera
