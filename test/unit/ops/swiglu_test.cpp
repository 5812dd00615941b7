// SwiGLU on interleaved (gate, up) pairs: forward by the definition, backward against finite
// differences in f64, f32 against f64, and shape errors.
#include "tessera/ops/swiglu.h"

#include <cmath>

#include "op_test_util.h"

namespace tessera {
namespace {

using test::OwnedTensor;

TEST(OpsSwiglu, ForwardIsSiluOfGateTimesUp) {
  OwnedTensor in(DType::f64, {3, 8}), out(DType::f64, {3, 4});
  test::fill_normal(in, 1, 2.0);
  ops::swiglu_forward(in, out);
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t j = 0; j < 4; ++j) {
      const double g = in.at<double>(r * 8 + 2 * j), u = in.at<double>(r * 8 + 2 * j + 1);
      EXPECT_NEAR(out.at<double>(r * 4 + j), g / (1.0 + std::exp(-g)) * u, 1e-14) << r << " " << j;
    }
}

TEST(OpsSwiglu, BackwardMatchesFiniteDifferences) {
  OwnedTensor in(DType::f64, {4, 6}), out(DType::f64, {4, 3}), dout(DType::f64, {4, 3}), din(DType::f64, {4, 6});
  test::fill_normal(in, 2, 1.5);
  test::fill_normal(dout, 3);
  auto loss = [&] {
    ops::swiglu_forward(in, out);
    return test::dot(out, dout);
  };
  for (int64_t i = 0; i < din.numel(); ++i) din.at<double>(i) = 7.0;  // must be overwritten
  ops::swiglu_backward(dout, in, din);
  test::expect_gradient_matches(loss, in, test::values_of(din), "dswiglu");
}

TEST(OpsSwiglu, F32AgreesWithF64) {
  OwnedTensor in(DType::f64, {5, 10}), in32(DType::f32, {5, 10}), out(DType::f64, {5, 5}), out32(DType::f32, {5, 5});
  test::fill_normal(in, 4, 3.0);
  test::copy_to_f32(in, in32);
  ops::swiglu_forward(in, out);
  ops::swiglu_forward(in32, out32);
  for (int64_t i = 0; i < out.numel(); ++i) EXPECT_NEAR(out32.at<float>(i), out.at<double>(i), 1e-5);
  OwnedTensor dout(DType::f64, {5, 5}), dout32(DType::f32, {5, 5}), din(DType::f64, {5, 10}), din32(DType::f32, {5, 10});
  test::fill_normal(dout, 5);
  test::copy_to_f32(dout, dout32);
  ops::swiglu_backward(dout, in, din);
  ops::swiglu_backward(dout32, in32, din32);
  for (int64_t i = 0; i < din.numel(); ++i) EXPECT_NEAR(din32.at<float>(i), din.at<double>(i), 1e-5);
}

TEST(OpsSwiglu, ShapeErrors) {
  OwnedTensor odd(DType::f32, {2, 5}), in(DType::f32, {2, 6}), wrong(DType::f32, {2, 4}), half(DType::f32, {2, 3});
  OwnedTensor f64(DType::f64, {2, 3});
  test::expect_error_containing([&] { ops::swiglu_forward(odd, half); }, {"swiglu_forward", "[n, 2f]"});
  test::expect_error_containing([&] { ops::swiglu_forward(in, wrong); }, {"swiglu_forward", "out must be [2, 3]"});
  test::expect_error_containing([&] { ops::swiglu_forward(in, f64); }, {"swiglu_forward"});
  test::expect_error_containing([&] { ops::swiglu_backward(half, in, wrong); }, {"swiglu_backward", "din"});
}

}  // namespace
}  // namespace tessera
