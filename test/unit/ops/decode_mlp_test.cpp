// The decode MLP's reference path (ops/decode_mlp.h on the CPU: two decode linears) against a
// hand-written h + fc2(gelu(fc1(LayerNorm(h)))) in double, tanh and erf GeLU, with and without biases;
// the CPU never takes the fused kernel; argument errors (shapes, aliasing, a CPU fc2 weight for the
// fused kernel's state).
#include "tessera/ops/decode_mlp.h"

#include <cmath>
#include <vector>

#include "op_test_util.h"

namespace tessera {
namespace {

using test::OwnedTensor;

void expect_matches_hand_computed(bool gelu_erf, bool bias) {
  const int64_t rows = 3, hidden = 16, ffn = 40;
  const double eps = 1e-5;
  OwnedTensor h(DType::f32, {rows, hidden}), w1(DType::f32, {ffn, hidden}), b1(DType::f32, {ffn}),
      w2(DType::f32, {hidden, ffn}), b2(DType::f32, {hidden}), gamma(DType::f32, {hidden}), beta(DType::f32, {hidden}),
      out(DType::f32, {rows, hidden});
  test::fill_normal(h, 1, 2.0);
  test::fill_normal(w1, 2, 0.3);
  test::fill_normal(b1, 3);
  test::fill_normal(w2, 4, 0.2);
  test::fill_normal(b2, 5);
  test::fill_normal(gamma, 6);
  test::fill_normal(beta, 7);
  ops::DecodeMlp m{gamma, beta, eps, w1, Tensor(), w2, Tensor(), gelu_erf, nullptr};
  if (bias) m.fc1_bias = b1, m.fc2_bias = b2;
  Arena arena(size_t(1) << 20, Device::cpu());
  EXPECT_FALSE(ops::decode_mlp_fuses(h, m, out));
  ops::decode_mlp_forward(arena, h, m, out);
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < hidden; ++j) mean += h.at<float>(r * hidden + j) / double(hidden);
    for (int64_t j = 0; j < hidden; ++j) var += std::pow(h.at<float>(r * hidden + j) - mean, 2) / double(hidden);
    std::vector<double> x(static_cast<size_t>(hidden)), a(static_cast<size_t>(ffn));
    for (int64_t j = 0; j < hidden; ++j)
      x[j] = (h.at<float>(r * hidden + j) - mean) / std::sqrt(var + eps) * gamma.at<float>(j) + beta.at<float>(j);
    for (int64_t f = 0; f < ffn; ++f) {
      double v = bias ? b1.at<float>(f) : 0.0;
      for (int64_t j = 0; j < hidden; ++j) v += x[j] * w1.at<float>(f * hidden + j);
      a[f] = gelu_erf ? 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)))
                      : 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
    }
    for (int64_t o = 0; o < hidden; ++o) {
      double v = bias ? b2.at<float>(o) : 0.0;
      for (int64_t f = 0; f < ffn; ++f) v += a[f] * w2.at<float>(o * ffn + f);
      v += h.at<float>(r * hidden + o);
      EXPECT_NEAR(out.at<float>(r * hidden + o), v, 1e-4 * (1 + std::fabs(v))) << "row " << r << " col " << o;
    }
  }
}

TEST(OpsDecodeMlp, CpuPathEqualsHandComputedLayerNormMlpAndResidual) {
  for (bool gelu_erf : {false, true})
    for (bool bias : {false, true}) expect_matches_hand_computed(gelu_erf, bias);
}

TEST(OpsDecodeMlp, RejectsBadArguments) {
  OwnedTensor h(DType::f32, {2, 8}), w1(DType::f32, {12, 8}), w2(DType::f32, {8, 12}), w2_wrong(DType::f32, {12, 8}),
      gamma(DType::f32, {8}), beta(DType::f32, {8}), out(DType::f32, {2, 8}), wrong(DType::f32, {2, 9});
  Arena arena(size_t(1) << 20, Device::cpu());
  ops::DecodeMlp m{gamma, beta, 1e-5, w1, Tensor(), w2, Tensor(), false, nullptr};
  EXPECT_THROW(ops::decode_mlp_forward(arena, h, m, wrong), Error);  // out shape
  EXPECT_THROW(ops::decode_mlp_forward(arena, h, m, h), Error);      // out aliases h
  m.fc2_weight = w2_wrong;
  EXPECT_THROW(ops::decode_mlp_forward(arena, h, m, out), Error);  // fc2 not [hidden, ffn]
  m.fc2_weight = w2;
  m.ln_bias = Tensor();
  EXPECT_THROW(ops::decode_mlp_forward(arena, h, m, out), Error);  // no LayerNorm bias
  // The fused kernel's state wants a bf16/f16 weight on a GPU.
  OwnedTensor workspace(DType::u8, {64});
  EXPECT_THROW(ops::DecodeMlpState(w2, workspace), Error);
}

}  // namespace
}  // namespace tessera
