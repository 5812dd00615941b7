// LayerNorm: forward against the direct formula (biased variance), saved statistics, backward against
// finite differences, and accumulate-vs-overwrite semantics.
#include "tessera/ops/elementwise.h"
#include "tessera/ops/layernorm.h"

#include "op_test_util.h"

namespace tessera {
namespace {

using test::OwnedTensor;

TEST(OpsLayerNorm, ForwardMatchesFormula) {
  const int64_t rows = 3, hidden = 6;
  const double eps = 1e-5;
  OwnedTensor in(DType::f64, {rows, hidden}), weight(DType::f64, {hidden}), bias(DType::f64, {hidden});
  test::fill_normal(in, 1, 3.0);
  test::fill_normal(weight, 2);
  test::fill_normal(bias, 3);
  in.at<double>(0) += 10.0;  // a row with a large offset
  OwnedTensor out(DType::f64, {rows, hidden}), mean(DType::f64, {rows}), rstd(DType::f64, {rows});
  ops::layernorm_forward(in, weight, bias, eps, out, mean, rstd);
  OwnedTensor in32(DType::f32, {rows, hidden}), weight32(DType::f32, {hidden}), bias32(DType::f32, {hidden});
  test::copy_to_f32(in, in32);
  test::copy_to_f32(weight, weight32);
  test::copy_to_f32(bias, bias32);
  OwnedTensor out32(DType::f32, {rows, hidden}), mean32(DType::f32, {rows}), rstd32(DType::f32, {rows});
  ops::layernorm_forward(in32, weight32, bias32, eps, out32, mean32, rstd32);
  for (int64_t r = 0; r < rows; ++r) {
    double m = 0, var = 0;
    for (int64_t j = 0; j < hidden; ++j) m += in.at<double>(r * hidden + j) / hidden;
    for (int64_t j = 0; j < hidden; ++j) var += std::pow(in.at<double>(r * hidden + j) - m, 2) / hidden;  // biased
    EXPECT_NEAR(mean.at<double>(r), m, 1e-12);
    EXPECT_NEAR(rstd.at<double>(r), 1 / std::sqrt(var + eps), 1e-12);
    for (int64_t j = 0; j < hidden; ++j) {
      const double y = (in.at<double>(r * hidden + j) - m) / std::sqrt(var + eps) * weight.at<double>(j) + bias.at<double>(j);
      EXPECT_NEAR(out.at<double>(r * hidden + j), y, 1e-12);
      EXPECT_NEAR(out32.at<float>(r * hidden + j), y, 1e-5);
    }
  }
}

TEST(OpsLayerNorm, EpsIsUsedAsPassed) {
  // A constant row has variance 0, so rstd = 1/sqrt(eps) exactly.
  OwnedTensor in(DType::f64, {1, 4}), weight(DType::f64, {4}), bias(DType::f64, {4});
  OwnedTensor out(DType::f64, {1, 4}), mean(DType::f64, {1}), rstd(DType::f64, {1});
  for (int j = 0; j < 4; ++j) in.at<double>(j) = 2.5, weight.at<double>(j) = 1.0;
  ops::layernorm_forward(in, weight, bias, 0.25, out, mean, rstd);
  EXPECT_DOUBLE_EQ(mean.at<double>(0), 2.5);
  EXPECT_DOUBLE_EQ(rstd.at<double>(0), 2.0);
}

TEST(OpsLayerNorm, BackwardMatchesFiniteDifferencesAndAccumulates) {
  const int64_t s = 3, b = 2, hidden = 5;
  OwnedTensor in(DType::f64, {s, b, hidden}), weight(DType::f64, {hidden}), bias(DType::f64, {hidden});
  OwnedTensor out(DType::f64, {s, b, hidden}), mean(DType::f64, {s, b}), rstd(DType::f64, {s, b});
  OwnedTensor dout(DType::f64, {s, b, hidden});
  test::fill_normal(in, 11, 2.0);
  test::fill_normal(weight, 12);
  test::fill_normal(bias, 13);
  test::fill_normal(dout, 14);
  auto loss = [&] {
    ops::layernorm_forward(in, weight, bias, 1e-5, out, mean, rstd);
    return test::dot(out, dout);
  };
  loss();
  OwnedTensor din(DType::f64, {s, b, hidden}), dweight(DType::f64, {hidden}), dbias(DType::f64, {hidden});
  for (int64_t i = 0; i < din.numel(); ++i) din.at<double>(i) = 7.0;  // overwritten
  for (int64_t j = 0; j < hidden; ++j) dweight.at<double>(j) = 0.5, dbias.at<double>(j) = -0.25;  // accumulated
  ops::layernorm_backward(dout, in, weight, mean, rstd, din, dweight, dbias);
  auto dweight_only = test::values_of(dweight), dbias_only = test::values_of(dbias);
  for (auto& v : dweight_only) v -= 0.5;
  for (auto& v : dbias_only) v += 0.25;
  test::expect_gradient_matches(loss, in, test::values_of(din), "din");
  test::expect_gradient_matches(loss, weight, dweight_only, "dweight");
  test::expect_gradient_matches(loss, bias, dbias_only, "dbias");
}

TEST(OpsLayerNorm, BackwardAddsTheResidualGradientBeforeRounding) {
  const int64_t rows = 6, hidden = 16;
  auto fill = test::normal_tensor;
  for (DType t : {DType::f32, DType::bf16}) {
    OwnedTensor in = fill(t, {rows, hidden}, 21, 2.0), weight = fill(t, {hidden}, 22, 1.0),
                bias = fill(t, {hidden}, 23, 1.0), dout = fill(t, {rows, hidden}, 24, 1.0),
                residual = fill(t, {rows, hidden}, 25, 3.0);
    OwnedTensor out(t, {rows, hidden}), mean(t, {rows}), rstd(t, {rows});
    ops::layernorm_forward(in, weight, bias, 1e-5, out, mean, rstd);
    OwnedTensor fused(t, {rows, hidden}), plain(t, {rows, hidden}), dw(t, {hidden}), db(t, {hidden});
    ops::layernorm_backward(dout, in, weight, mean, rstd, fused, dw, db, residual);
    ops::layernorm_backward(dout, in, weight, mean, rstd, plain, dw, db);
    // In f32 the sum is the unfused backward + add exactly; in bf16 the norm's gradient is not rounded
    // before the add: the f32 computation's sum rounded once.
    OwnedTensor in32(DType::f32, {rows, hidden}), w32(DType::f32, {hidden}), dout32(DType::f32, {rows, hidden}),
        res32(DType::f32, {rows, hidden}), mean32(DType::f32, {rows}), rstd32(DType::f32, {rows});
    for (auto [src, dst] : {std::pair{&in, &in32}, {&weight, &w32}, {&dout, &dout32}, {&residual, &res32}, {&mean, &mean32},
                            {&rstd, &rstd32}})
      ops::copy(*src, *dst);
    OwnedTensor plain32(DType::f32, {rows, hidden}), dw32(DType::f32, {hidden}), db32(DType::f32, {hidden});
    ops::layernorm_backward(dout32, in32, w32, mean32, rstd32, plain32, dw32, db32);
    OwnedTensor fused_as32(DType::f32, {rows, hidden}), plain_as32(DType::f32, {rows, hidden});
    ops::copy(fused, fused_as32);
    ops::copy(plain, plain_as32);
    int differs_from_two_roundings = 0;
    for (int64_t i = 0; i < rows * hidden; ++i) {
      const float sum32 = plain32.at<float>(i) + res32.at<float>(i);
      OwnedTensor one(DType::f32, {1}), rounded(t, {1}), back(DType::f32, {1});
      one.at<float>(0) = sum32;
      ops::copy(one, rounded);
      ops::copy(rounded, back);
      EXPECT_EQ(fused_as32.at<float>(i), back.at<float>(0)) << dtype_name(t) << " element " << i;
      const float twice = plain_as32.at<float>(i) + res32.at<float>(i);
      one.at<float>(0) = twice;
      ops::copy(one, rounded);
      ops::copy(rounded, back);
      differs_from_two_roundings += back.at<float>(0) != fused_as32.at<float>(i);
    }
    if (t == DType::f32) EXPECT_EQ(differs_from_two_roundings, 0);
  }
  // In place: din aliasing dout, and a residual of the wrong shape is refused.
  OwnedTensor in(DType::f64, {rows, hidden}), weight(DType::f64, {hidden}), bias(DType::f64, {hidden}),
      out(DType::f64, {rows, hidden}), mean(DType::f64, {rows}), rstd(DType::f64, {rows}), dw(DType::f64, {hidden}),
      db(DType::f64, {hidden}), dout(DType::f64, {rows, hidden}), residual(DType::f64, {rows, hidden}),
      expected(DType::f64, {rows, hidden});
  test::fill_normal(in, 31, 1.0);
  test::fill_normal(weight, 32);
  test::fill_normal(dout, 33);
  test::fill_normal(residual, 34);
  ops::layernorm_forward(in, weight, bias, 1e-5, out, mean, rstd);
  ops::layernorm_backward(dout, in, weight, mean, rstd, expected, dw, db);
  for (int64_t i = 0; i < rows * hidden; ++i) expected.at<double>(i) += residual.at<double>(i);
  ops::layernorm_backward(dout, in, weight, mean, rstd, dout, dw, db, residual);
  for (int64_t i = 0; i < rows * hidden; ++i) EXPECT_EQ(dout.at<double>(i), expected.at<double>(i)) << i;
  OwnedTensor short_residual(DType::f64, {rows - 1, hidden});
  test::expect_error_containing([&] { ops::layernorm_backward(in, in, weight, mean, rstd, out, dw, db, short_residual); },
                                {"layernorm_backward", "residual_grad"});
}

TEST(OpsLayerNorm, ShapeErrors) {
  OwnedTensor in(DType::f32, {2, 4}), weight(DType::f32, {4}), bias(DType::f32, {4}), out(DType::f32, {2, 4});
  OwnedTensor mean(DType::f32, {3}), rstd(DType::f32, {2});
  test::expect_error_containing([&] { ops::layernorm_forward(in, weight, bias, 1e-5, out, mean, rstd); },
                                {"layernorm_forward", "mean must be [2]"});
  OwnedTensor short_bias(DType::f32, {3}), mean_ok(DType::f32, {2});
  test::expect_error_containing([&] { ops::layernorm_forward(in, weight, short_bias, 1e-5, out, mean_ok, rstd); },
                                {"bias must have the shape of weight"});
}

}  // namespace
}  // namespace tessera
