// GeLU (tanh approximation, GPT-2's gelu_new): forward against the formula and known values, backward
// against finite differences.
#include "tessera/ops/activation.h"

#include "op_test_util.h"

namespace tessera {
namespace {

using test::OwnedTensor;

TEST(OpsGelu, ForwardMatchesTanhFormula) {
  OwnedTensor in(DType::f64, {7}), out(DType::f64, {7});
  OwnedTensor in32(DType::f32, {7}), out32(DType::f32, {7});
  const double xs[] = {-3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 3.0};
  for (int i = 0; i < 7; ++i) in.at<double>(i) = xs[i];
  test::copy_to_f32(in, in32);
  ops::gelu_forward(in, out);
  ops::gelu_forward(in32, out32);
  const double pi = 3.14159265358979323846;
  for (int i = 0; i < 7; ++i) {
    const double x = xs[i];
    const double expected = 0.5 * x * (1 + std::tanh(std::sqrt(2 / pi) * (x + 0.044715 * x * x * x)));
    EXPECT_NEAR(out.at<double>(i), expected, 1e-15);
    EXPECT_NEAR(out32.at<float>(i), expected, 1e-6);
  }
  // gelu_new(1) from the tanh form (differs from the exact erf GeLU 0.8413447).
  EXPECT_NEAR(out.at<double>(5), 0.8411919906082768, 1e-12);
  EXPECT_EQ(out.at<double>(3), 0.0);
}

TEST(OpsGelu, BackwardMatchesFiniteDifferences) {
  OwnedTensor in(DType::f64, {3, 4}), out(DType::f64, {3, 4}), dout(DType::f64, {3, 4}), din(DType::f64, {3, 4});
  test::fill_normal(in, 1, 2.0);
  test::fill_normal(dout, 2);
  ops::gelu_backward(dout, in, din);
  auto loss = [&] {
    ops::gelu_forward(in, out);
    return test::dot(out, dout);
  };
  test::expect_gradient_matches(loss, in, test::values_of(din), "din");
}

TEST(OpsGelu, ShapeMismatchIsAnError) {
  OwnedTensor in(DType::f32, {3}), out(DType::f32, {4});
  test::expect_error_containing([&] { ops::gelu_forward(in, out); }, {"gelu_forward", "out must have the shape"});
}

// The exact (erf) GeLU and tanh (BERT): forward against the formulas, backward against finite differences.
TEST(OpsActivation, ExactGeluAndTanhMatchTheirFormulas) {
  OwnedTensor in(DType::f64, {7}), out(DType::f64, {7}), in32(DType::f32, {7}), out32(DType::f32, {7});
  const double xs[] = {-3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 3.0};
  for (int i = 0; i < 7; ++i) in.at<double>(i) = xs[i];
  test::copy_to_f32(in, in32);
  ops::activation_forward(ops::Activation::gelu_erf, in, out);
  ops::activation_forward(ops::Activation::gelu_erf, in32, out32);
  for (int i = 0; i < 7; ++i) {
    const double expected = 0.5 * xs[i] * (1 + std::erf(xs[i] / std::sqrt(2.0)));
    EXPECT_NEAR(out.at<double>(i), expected, 1e-15);
    EXPECT_NEAR(out32.at<float>(i), expected, 1e-6);
  }
  EXPECT_NEAR(out.at<double>(5), 0.8413447460685429, 1e-12);  // x Phi(x) at 1
  ops::activation_forward(ops::Activation::tanh, in, out);
  for (int i = 0; i < 7; ++i) EXPECT_NEAR(out.at<double>(i), std::tanh(xs[i]), 1e-15);
}

TEST(OpsActivation, ExactGeluAndTanhBackwardMatchFiniteDifferences) {
  for (ops::Activation kind : {ops::Activation::gelu_erf, ops::Activation::tanh}) {
    OwnedTensor in(DType::f64, {3, 4}), out(DType::f64, {3, 4}), dout(DType::f64, {3, 4}), din(DType::f64, {3, 4});
    test::fill_normal(in, 1, 2.0);
    test::fill_normal(dout, 2);
    ops::activation_backward(kind, dout, in, din);
    auto loss = [&] {
      ops::activation_forward(kind, in, out);
      return test::dot(out, dout);
    };
    test::expect_gradient_matches(loss, in, test::values_of(din), "din");
  }
}

}  // namespace
}  // namespace tessera
