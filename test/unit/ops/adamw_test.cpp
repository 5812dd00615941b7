// AdamW against a two-step example worked by hand (decoupled weight decay, bias correction).
#include "tessera/ops/adamw.h"

#include "op_test_util.h"

namespace tessera {
namespace {

using test::OwnedTensor;

TEST(OpsAdamW, TwoStepsMatchHandComputation) {
  OwnedTensor param(DType::f32, {2}), grad(DType::f32, {2}), m(DType::f32, {2}), v(DType::f32, {2});
  param.at<float>(0) = 1.0f;
  param.at<float>(1) = -2.0f;  // zero gradient: only weight decay moves it
  ops::AdamWParams p;
  p.lr = 0.1, p.beta1 = 0.9, p.beta2 = 0.999, p.eps = 1e-8, p.weight_decay = 0.01;

  // Step 1, g = 0.5: p = 1 (1 - 0.1*0.01) = 0.999; m = 0.05; v = 0.001 * 0.25 = 2.5e-4;
  // m^ = 0.05 / 0.1 = 0.5; v^ = 2.5e-4 / 0.001 = 0.25; p -= 0.1 * 0.5 / (0.5 + 1e-8) -> 0.899000002.
  grad.at<float>(0) = 0.5f;
  p.step = 1;
  ops::adamw_update(param, grad, m, v, p);
  EXPECT_NEAR(m.at<float>(0), 0.05, 1e-8);
  EXPECT_NEAR(v.at<float>(0), 2.5e-4, 5e-11);
  EXPECT_NEAR(param.at<float>(0), 0.899000002, 1e-7);
  EXPECT_NEAR(param.at<float>(1), -1.998, 1e-7);  // -2 * 0.999

  // Step 2, g = -0.25: p = 0.899000002 * 0.999 = 0.898101001998; m = 0.045 - 0.025 = 0.02;
  // v = 0.999 * 2.5e-4 + 0.001 * 0.0625 = 3.1225e-4; m^ = 0.02 / 0.19 = 0.105263158;
  // v^ = 3.1225e-4 / 0.001999 = 0.156203102, sqrt 0.395225381; p -= 0.1 * 0.266337... -> 0.871467299.
  grad.at<float>(0) = -0.25f;
  p.step = 2;
  ops::adamw_update(param, grad, m, v, p);
  EXPECT_NEAR(m.at<float>(0), 0.02, 1e-8);
  EXPECT_NEAR(v.at<float>(0), 3.1225e-4, 5e-11);
  EXPECT_NEAR(param.at<float>(0), 0.8714672987, 2e-7);
  EXPECT_NEAR(param.at<float>(1), -1.996002, 2e-7);  // -1.998 * 0.999
  EXPECT_EQ(m.at<float>(1), 0.0f);
  EXPECT_EQ(v.at<float>(1), 0.0f);
}

TEST(OpsAdamW, ArgumentErrors) {
  OwnedTensor param(DType::f32, {3}), grad(DType::f32, {4}), m(DType::f32, {3}), v(DType::f32, {3});
  test::expect_error_containing([&] { ops::adamw_update(param, grad, m, v, {}); },
                                {"adamw_update", "grad must have the shape of param"});
  ops::AdamWParams p;
  p.step = 0;
  test::expect_error_containing([&] { ops::adamw_update(param, m, m, v, p); }, {"step counts from 1"});
}

}  // namespace
}  // namespace tessera
