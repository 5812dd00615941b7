// Global grad-norm clipping: Megatron's coefficient clip/(norm + 1e-6), the local-sum + finish
// split used across ranks, and grads scaled to the clipped norm.
#include "tessera/optim/grad_clip.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tessera/core/buffer.h"

namespace tessera::optim {
namespace {

TEST(ClipCoefficient, MegatronFormula) {
  EXPECT_DOUBLE_EQ(clip_coefficient(5.0, 1.0), 1.0 / (5.0 + 1e-6));
  EXPECT_DOUBLE_EQ(clip_coefficient(2.5, 1.0), 1.0 / 2.500001);
  EXPECT_DOUBLE_EQ(clip_coefficient(0.5, 1.0), 1.0);  // below the threshold: untouched
  EXPECT_DOUBLE_EQ(clip_coefficient(1.0, 1.0), 1.0 / 1.000001);  // at the threshold the +1e-6 still clips
  EXPECT_DOUBLE_EQ(clip_coefficient(1.0 - 1e-6, 1.0), 1.0);       // coeff == 1 exactly: no scaling
  EXPECT_DOUBLE_EQ(clip_coefficient(100.0, 0.0), 1.0);  // clip_grad = 0 disables clipping
  EXPECT_DOUBLE_EQ(clip_coefficient(std::nan(""), 1.0), 1.0);
  EXPECT_DOUBLE_EQ(clip_coefficient(std::numeric_limits<double>::infinity(), 1.0), 0.0);
}

TEST(GradClip, LocalSumsFinishIntoTheGlobalNorm) {
  Buffer grads(6 * sizeof(float));
  float* g = static_cast<float*>(grads.data());
  const float values[6] = {3.0f, 0.0f, 0.0f, 4.0f, 12.0f, 0.0f};  // ||.|| = 13
  std::copy(values, values + 6, g);
  Tensor a = grads.as_tensor(DType::f32, {2, 2}, 0);
  Tensor b = grads.as_tensor(DType::f32, {2}, 4 * sizeof(float));
  EXPECT_DOUBLE_EQ(local_sum_of_squares({a}), 25.0);
  EXPECT_DOUBLE_EQ(local_sum_of_squares({b}), 144.0);
  // Two "ranks" holding a and b: the all-reduce (later) sums their local values.
  const double norm = finish_grad_norm(local_sum_of_squares({a}) + local_sum_of_squares({b}));
  EXPECT_DOUBLE_EQ(norm, 13.0);
  EXPECT_DOUBLE_EQ(finish_grad_norm(local_sum_of_squares({a, b})), 13.0);
  EXPECT_DOUBLE_EQ(local_sum_of_squares({}), 0.0);
}

TEST(GradClip, ClipGradNormScalesToTheClipValue) {
  Buffer grads(6 * sizeof(float));
  float* g = static_cast<float*>(grads.data());
  const float values[6] = {3.0f, 0.0f, 0.0f, 4.0f, 12.0f, 0.0f};
  std::copy(values, values + 6, g);
  std::vector<Tensor> list = {grads.as_tensor(DType::f32, {2, 2}, 0),
                              grads.as_tensor(DType::f32, {2}, 4 * sizeof(float))};
  const double norm = clip_grad_norm(list, 1.0);
  EXPECT_DOUBLE_EQ(norm, 13.0);  // the norm before clipping is what gets logged
  const double coefficient = 1.0 / (13.0 + 1e-6);
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(g[i], values[i] * coefficient, 1e-7) << i;
  EXPECT_NEAR(finish_grad_norm(local_sum_of_squares(list)), 1.0, 1e-6);

  // Already below the clip value: unchanged.
  const double small_norm = clip_grad_norm(list, 2.0);
  EXPECT_NEAR(small_norm, 1.0, 1e-6);
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(g[i], values[i] * coefficient, 1e-7) << i;
}

}  // namespace
}  // namespace tessera::optim
