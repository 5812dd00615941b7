// Fused bias + dropout + residual add: bit-for-bit equal to add(residual, dropout_forward(x + bias)),
// the dropout mask's index offset, backward (dx, dbias, dresidual = dout) against finite differences
// with dbias accumulating, and argument errors.
#include "tessera/ops/bias_dropout_add.h"

#include <cstring>

#include "op_test_util.h"
#include "tessera/ops/dropout.h"
#include "tessera/ops/elementwise.h"

namespace tessera {
namespace {

using test::OwnedTensor;

// out = add(residual, dropout_forward(x + bias)) through the unfused ops.
template <typename T>
void unfused(const OwnedTensor& x, const OwnedTensor* bias, const OwnedTensor& residual, double p,
             const RandomStream& stream, uint64_t offset, const OwnedTensor& out) {
  const int64_t cols = x.tensor().dim(-1);
  OwnedTensor biased(x.tensor().dtype(), x.tensor().shape()), dropped(x.tensor().dtype(), x.tensor().shape());
  for (int64_t i = 0; i < x.numel(); ++i) biased.at<T>(i) = bias ? x.at<T>(i) + bias->at<T>(i % cols) : x.at<T>(i);
  ops::dropout_forward(biased, p, stream, offset, dropped);
  ops::add(residual, dropped, out);
}

template <typename T>
void expect_fused_equals_unfused(DType dtype, double p, bool with_bias) {
  const int64_t s = 5, b = 3, h = 37;
  const RandomStream stream(77, mix_stream(stream_id("layers.0.hidden_dropout"), 4));
  const uint64_t offset = 1000003;
  OwnedTensor x(dtype, {s, b, h}), bias(dtype, {h}), residual(dtype, {s, b, h}), fused(dtype, {s, b, h}),
      reference(dtype, {s, b, h});
  test::fill_normal(x, 1);
  test::fill_normal(bias, 2);
  test::fill_normal(residual, 3);
  ops::bias_dropout_add_forward(x, with_bias ? bias.tensor() : Tensor(), residual, p, stream, offset, fused);
  unfused<T>(x, with_bias ? &bias : nullptr, residual, p, stream, offset, reference);
  int dropped = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    EXPECT_EQ(std::memcmp(&fused.at<T>(i), &reference.at<T>(i), sizeof(T)), 0)
        << i << ": " << fused.at<T>(i) << " vs " << reference.at<T>(i);
    dropped += fused.at<T>(i) == residual.at<T>(i);
  }
  if (p > 0) EXPECT_NEAR(double(dropped) / x.numel(), p, 0.06);
  else EXPECT_EQ(dropped, 0);
}

TEST(OpsBiasDropoutAdd, EqualsUnfusedOpsBitForBit) {
  expect_fused_equals_unfused<float>(DType::f32, 0.1, true);
  expect_fused_equals_unfused<float>(DType::f32, 0.5, false);
  expect_fused_equals_unfused<float>(DType::f32, 0.0, true);
  expect_fused_equals_unfused<double>(DType::f64, 0.3, true);
}

TEST(OpsBiasDropoutAdd, OutMayAliasTheResidual) {
  const int64_t n = 4, h = 16;
  const RandomStream stream(5, 6);
  OwnedTensor x(DType::f32, {n, h}), bias(DType::f32, {h}), residual(DType::f32, {n, h}), out(DType::f32, {n, h});
  test::fill_normal(x, 7);
  test::fill_normal(bias, 8);
  test::fill_normal(residual, 9);
  ops::bias_dropout_add_forward(x, bias, residual, 0.2, stream, 0, out);
  ops::bias_dropout_add_forward(x, bias, residual, 0.2, stream, 0, residual);  // in place on the residual
  for (int64_t i = 0; i < out.numel(); ++i) EXPECT_EQ(residual.at<float>(i), out.at<float>(i));
}

TEST(OpsBiasDropoutAdd, BackwardMatchesFiniteDifferencesAndAccumulates) {
  const int64_t s = 3, b = 2, h = 5;
  const double p = 0.3;
  const RandomStream stream(13, 14);
  const uint64_t offset = 21;
  OwnedTensor x(DType::f64, {s, b, h}), bias(DType::f64, {h}), residual(DType::f64, {s, b, h}),
      out(DType::f64, {s, b, h}), dout(DType::f64, {s, b, h});
  test::fill_normal(x, 1);
  test::fill_normal(bias, 2);
  test::fill_normal(residual, 3);
  test::fill_normal(dout, 4);
  auto loss = [&] {
    ops::bias_dropout_add_forward(x, bias, residual, p, stream, offset, out);
    return test::dot(out, dout);
  };
  OwnedTensor dx(DType::f64, {s, b, h}), dbias(DType::f64, {h});
  for (int64_t i = 0; i < dx.numel(); ++i) dx.at<double>(i) = 9.0;    // overwritten
  for (int64_t j = 0; j < h; ++j) dbias.at<double>(j) = 0.75;         // accumulated
  ops::bias_dropout_add_backward(dout, p, stream, offset, dx, dbias);
  auto dbias_only = test::values_of(dbias);
  for (auto& v : dbias_only) v -= 0.75;
  test::expect_gradient_matches(loss, x, test::values_of(dx), "dx");
  test::expect_gradient_matches(loss, bias, dbias_only, "dbias");
  test::expect_gradient_matches(loss, residual, test::values_of(dout), "dresidual (= dout)");
  int zeros = 0;
  for (int64_t i = 0; i < dx.numel(); ++i) zeros += dx.at<double>(i) == 0.0;
  EXPECT_GT(zeros, 0);  // some elements dropped, so the mask is exercised
  // Without dbias, dx alone (and in place on dout).
  OwnedTensor dx_only(DType::f64, {s, b, h});
  ops::bias_dropout_add_backward(dout, p, stream, offset, dx_only, Tensor());
  ops::bias_dropout_add_backward(dout, p, stream, offset, dout, Tensor());
  for (int64_t i = 0; i < dx.numel(); ++i) {
    EXPECT_EQ(dx_only.at<double>(i), dx.at<double>(i));
    EXPECT_EQ(dout.at<double>(i), dx.at<double>(i));
  }
}

TEST(OpsBiasDropoutAdd, ArgumentErrors) {
  const RandomStream stream(1, 2);
  OwnedTensor x(DType::f32, {2, 4}), bias(DType::f32, {4}), residual(DType::f32, {2, 4}), out(DType::f32, {2, 4});
  test::expect_error_containing([&] { ops::bias_dropout_add_forward(x, bias, residual, 1.0, stream, 0, out); },
                                {"bias_dropout_add_forward", "[0, 1)"});
  OwnedTensor bad_bias(DType::f32, {3});
  test::expect_error_containing([&] { ops::bias_dropout_add_forward(x, bad_bias, residual, 0.1, stream, 0, out); },
                                {"bias must be [4]", "f32[3]"});
  OwnedTensor bad_residual(DType::f32, {4, 2});
  test::expect_error_containing([&] { ops::bias_dropout_add_forward(x, bias, bad_residual, 0.1, stream, 0, out); },
                                {"residual must have the shape of x [2, 4]", "f32[4, 2]"});
  OwnedTensor f64_out(DType::f64, {2, 4});
  test::expect_error_containing([&] { ops::bias_dropout_add_forward(x, bias, residual, 0.1, stream, 0, f64_out); },
                                {"out must have the dtype of x (f32)", "f64[2, 4]"});
  OwnedTensor bad_dbias(DType::f32, {2});
  test::expect_error_containing([&] { ops::bias_dropout_add_backward(out, 0.1, stream, 0, x, bad_dbias); },
                                {"bias_dropout_add_backward", "dbias must be [4]", "f32[2]"});
  OwnedTensor bad_dx(DType::f32, {8});
  test::expect_error_containing([&] { ops::bias_dropout_add_backward(out, 0.1, stream, 0, bad_dx, bias); },
                                {"dx must have the shape of dout [2, 4]"});
}

}  // namespace
}  // namespace tessera
