// Linear layer and matmul_nt: forward against loops (f64, f32), backward against finite differences,
// accumulate-vs-overwrite semantics and argument errors.
#include "tessera/ops/linear.h"

#include "op_test_util.h"

namespace tessera {
namespace {

using test::OwnedTensor;

TEST(OpsLinear, ForwardMatchesLoopsInF64AndF32) {
  const int64_t s = 3, b = 2, in_f = 5, out_f = 4;
  OwnedTensor in(DType::f64, {s, b, in_f}), weight(DType::f64, {out_f, in_f}), bias(DType::f64, {out_f});
  test::fill_normal(in, 1);
  test::fill_normal(weight, 2);
  test::fill_normal(bias, 3);
  OwnedTensor out(DType::f64, {s, b, out_f});
  ops::linear_forward(in, weight, bias, out);

  OwnedTensor in32(DType::f32, {s, b, in_f}), weight32(DType::f32, {out_f, in_f}), bias32(DType::f32, {out_f});
  test::copy_to_f32(in, in32);
  test::copy_to_f32(weight, weight32);
  test::copy_to_f32(bias, bias32);
  OwnedTensor out32(DType::f32, {s, b, out_f});
  ops::linear_forward(in32, weight32, bias32, out32);

  for (int64_t r = 0; r < s * b; ++r)
    for (int64_t o = 0; o < out_f; ++o) {
      double expected = bias.at<double>(o);
      for (int64_t i = 0; i < in_f; ++i) expected += in.at<double>(r * in_f + i) * weight.at<double>(o * in_f + i);
      EXPECT_NEAR(out.at<double>(r * out_f + o), expected, 1e-12);
      EXPECT_NEAR(out32.at<float>(r * out_f + o), expected, 1e-5);
    }
}

TEST(OpsLinear, ForwardWithoutBias) {
  OwnedTensor in(DType::f64, {2, 3}), weight(DType::f64, {2, 3}), out(DType::f64, {2, 2});
  for (int i = 0; i < 6; ++i) in.at<double>(i) = i + 1;      // [[1 2 3] [4 5 6]]
  for (int i = 0; i < 6; ++i) weight.at<double>(i) = i - 2;  // [[-2 -1 0] [1 2 3]]
  ops::linear_forward(in, weight, Tensor(), out);
  EXPECT_DOUBLE_EQ(out.at<double>(0), -4);  // 1*-2 + 2*-1 + 3*0
  EXPECT_DOUBLE_EQ(out.at<double>(1), 14);  // 1 + 4 + 9
  EXPECT_DOUBLE_EQ(out.at<double>(2), -13);
  EXPECT_DOUBLE_EQ(out.at<double>(3), 32);
}

TEST(OpsLinear, BackwardMatchesFiniteDifferences) {
  const int64_t rows = 4, in_f = 3, out_f = 5;
  OwnedTensor in(DType::f64, {rows, in_f}), weight(DType::f64, {out_f, in_f}), bias(DType::f64, {out_f});
  OwnedTensor out(DType::f64, {rows, out_f}), dout(DType::f64, {rows, out_f});
  test::fill_normal(in, 11);
  test::fill_normal(weight, 12);
  test::fill_normal(bias, 13);
  test::fill_normal(dout, 14);
  auto loss = [&] {
    ops::linear_forward(in, weight, bias, out);
    return test::dot(out, dout);
  };
  OwnedTensor din(DType::f64, {rows, in_f}), dweight(DType::f64, {out_f, in_f}), dbias(DType::f64, {out_f});
  ops::linear_backward(dout, in, weight, din, dweight, dbias);
  test::expect_gradient_matches(loss, in, test::values_of(din), "din");
  test::expect_gradient_matches(loss, weight, test::values_of(dweight), "dweight");
  test::expect_gradient_matches(loss, bias, test::values_of(dbias), "dbias");
}

TEST(OpsLinear, BackwardAccumulatesWeightGradsAndOverwritesInputGrad) {
  const int64_t rows = 3, in_f = 2, out_f = 2;
  OwnedTensor in(DType::f64, {rows, in_f}), weight(DType::f64, {out_f, in_f}), dout(DType::f64, {rows, out_f});
  test::fill_normal(in, 21);
  test::fill_normal(weight, 22);
  test::fill_normal(dout, 23);
  OwnedTensor din(DType::f64, {rows, in_f}), dweight(DType::f64, {out_f, in_f}), dbias(DType::f64, {out_f});
  ops::linear_backward(dout, in, weight, din, dweight, dbias);
  const auto din_once = test::values_of(din), dweight_once = test::values_of(dweight);
  const auto dbias_once = test::values_of(dbias);
  for (int64_t i = 0; i < din.numel(); ++i) din.at<double>(i) = 1e6;  // must be overwritten
  ops::linear_backward(dout, in, weight, din, dweight, dbias);
  for (int64_t i = 0; i < din.numel(); ++i) EXPECT_DOUBLE_EQ(din.at<double>(i), din_once[i]);
  for (int64_t i = 0; i < dweight.numel(); ++i) EXPECT_NEAR(dweight.at<double>(i), 2 * dweight_once[i], 1e-14);
  for (int64_t i = 0; i < dbias.numel(); ++i) EXPECT_NEAR(dbias.at<double>(i), 2 * dbias_once[i], 1e-14);
  // dbias is the column sum of dout; dweight = dout^T . in.
  for (int64_t o = 0; o < out_f; ++o) {
    double column = 0;
    for (int64_t r = 0; r < rows; ++r) column += dout.at<double>(r * out_f + o);
    EXPECT_NEAR(dbias_once[o], column, 1e-14);
    for (int64_t i = 0; i < in_f; ++i) {
      double expected = 0;
      for (int64_t r = 0; r < rows; ++r) expected += dout.at<double>(r * out_f + o) * in.at<double>(r * in_f + i);
      EXPECT_NEAR(dweight_once[o * in_f + i], expected, 1e-14);
    }
  }
  // An undefined din, dweight or dbias is skipped.
  OwnedTensor dweight2(DType::f64, {out_f, in_f});
  ops::linear_backward(dout, in, weight, Tensor(), dweight2, Tensor());
  for (int64_t i = 0; i < dweight2.numel(); ++i) EXPECT_NEAR(dweight2.at<double>(i), dweight_once[i], 1e-14);
}

TEST(OpsLinear, MatmulNtOverwritesOrAccumulates) {
  OwnedTensor a(DType::f32, {2, 3}), b(DType::f32, {4, 3}), out(DType::f32, {2, 4});
  test::fill_normal(a, 31);
  test::fill_normal(b, 32);
  for (int64_t i = 0; i < out.numel(); ++i) out.at<float>(i) = 100.0f;
  ops::matmul_nt(a, b, out, false);
  std::vector<float> expected(8);
  for (int64_t m = 0; m < 2; ++m)
    for (int64_t n = 0; n < 4; ++n) {
      double sum = 0;
      for (int64_t k = 0; k < 3; ++k) sum += double(a.at<float>(m * 3 + k)) * b.at<float>(n * 3 + k);
      expected[m * 4 + n] = float(sum);
      EXPECT_NEAR(out.at<float>(m * 4 + n), sum, 1e-5);
    }
  ops::matmul_nt(a, b, out, true);
  for (int64_t i = 0; i < 8; ++i) EXPECT_NEAR(out.at<float>(i), 2 * expected[i], 1e-5);
}

TEST(OpsLinear, ErrorsNameTheShapesAndTheDevice) {
  OwnedTensor in(DType::f32, {2, 3}), weight(DType::f32, {4, 3}), out(DType::f32, {2, 5});
  test::expect_error_containing([&] { ops::linear_forward(in, weight, Tensor(), out); },
                                {"linear_forward", "out must be [2, 4]"});
  OwnedTensor wrong_in(DType::f32, {2, 2}), out_ok(DType::f32, {2, 4});
  test::expect_error_containing([&] { ops::linear_forward(wrong_in, weight, Tensor(), out_ok); },
                                {"in must be [..., 3]"});
  OwnedTensor in64(DType::f64, {2, 3});
  test::expect_error_containing([&] { ops::linear_forward(in64, weight, Tensor(), out_ok); },
                                {"weight must have the dtype of in"});
  OwnedTensor in_int(DType::i32, {2, 3}), weight_int(DType::i32, {4, 3}), out_int(DType::i32, {2, 4});
  test::expect_error_containing([&] { ops::linear_forward(in_int, weight_int, Tensor(), out_int); },
                                {"linear_forward", "f32"});
  float fake = 0;
  Tensor cuda_in(&fake, DType::f32, {2, 3}, Device::cuda(0));
  test::expect_error_containing([&] { ops::linear_forward(cuda_in, weight, Tensor(), out_ok); },
                                {"linear_forward: tensors on different devices"});
}

TEST(OpsLinear, ResidualForwardAddsTheResidualBeforeRounding) {
  const int64_t rows = 6, in_f = 24, out_f = 10;
  auto fill = test::normal_tensor;
  auto as_f32 = [](const OwnedTensor& t) {
    OwnedTensor f(DType::f32, t.tensor().shape());
    ops::copy(t, f);
    return f;
  };
  for (DType t : {DType::f32, DType::bf16}) {
    OwnedTensor in = fill(t, {rows, in_f}, 41, 1.0), weight = fill(t, {out_f, in_f}, 42, 0.5),
                bias = fill(t, {out_f}, 43, 1.0), residual = fill(t, {rows, out_f}, 44, 4.0);
    OwnedTensor fused(t, {rows, out_f});
    ops::linear_residual_forward(in, weight, bias, residual, fused);
    // The f32 linear of the same (rounded) inputs plus the residual, rounded once to t.
    OwnedTensor linear32(DType::f32, {rows, out_f});
    ops::linear_forward(as_f32(in), as_f32(weight), as_f32(bias), linear32);
    OwnedTensor fused32 = as_f32(fused), residual32 = as_f32(residual);
    for (int64_t i = 0; i < rows * out_f; ++i) {
      OwnedTensor one(DType::f32, {1}), rounded(t, {1}), back(DType::f32, {1});
      one.at<float>(0) = linear32.at<float>(i) + residual32.at<float>(i);
      ops::copy(one, rounded);
      ops::copy(rounded, back);
      EXPECT_EQ(fused32.at<float>(i), back.at<float>(0)) << dtype_name(t) << " element " << i;
    }
  }
  OwnedTensor in(DType::f32, {rows, in_f}), weight(DType::f32, {out_f, in_f}), out(DType::f32, {rows, out_f}),
      short_residual(DType::f32, {rows - 1, out_f});
  test::expect_error_containing([&] { ops::linear_residual_forward(in, weight, Tensor(), short_residual, out); },
                                {"linear_residual_forward", "residual"});
  test::expect_error_containing([&] { ops::linear_residual_forward(in, weight, Tensor(), out, out); },
                                {"linear_residual_forward: residual must not be out itself"});
}

}  // namespace
}  // namespace tessera
