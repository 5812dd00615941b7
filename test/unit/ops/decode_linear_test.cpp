// The decode linear's reference path (ops/decode_linear.h on the CPU: the separate ops) against a
// hand-written LayerNorm -> linear + bias -> GeLU / residual add in double, each epilogue, with and
// without the LayerNorm and the bias; the CPU never takes the fused kernel; argument errors.
#include "tessera/ops/decode_linear.h"

#include <cmath>
#include <vector>

#include "op_test_util.h"

namespace tessera {
namespace {

using test::OwnedTensor;

struct Case {
  bool layernorm, bias;
  ops::DecodeEpilogue epilogue;
};

void expect_matches_hand_computed(const Case& c) {
  const int64_t rows = 3, k = 24, n = 10;
  const double eps = 1e-5;
  OwnedTensor in(DType::f32, {rows, k}), w(DType::f32, {n, k}), b(DType::f32, {n}), gamma(DType::f32, {k}),
      beta(DType::f32, {k}), residual(DType::f32, {rows, n}), out(DType::f32, {rows, n});
  test::fill_normal(in, 1, 2.0);
  test::fill_normal(w, 2, 0.3);
  test::fill_normal(b, 3);
  test::fill_normal(gamma, 4);
  test::fill_normal(beta, 5);
  test::fill_normal(residual, 6);
  ops::DecodeLinear d;
  if (c.layernorm) d.ln_weight = gamma, d.ln_bias = beta, d.ln_eps = eps;
  d.weight = w;
  if (c.bias) d.bias = b;
  d.epilogue = c.epilogue;
  if (c.epilogue == ops::DecodeEpilogue::residual_add) d.residual = residual;
  Arena arena(size_t(1) << 20, Device::cpu());
  EXPECT_FALSE(ops::decode_linear_fuses(in, d, out));
  ops::decode_linear_forward(arena, in, d, out);
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<double> x(static_cast<size_t>(k));
    double mean = 0, var = 0;
    for (int64_t j = 0; j < k; ++j) mean += in.at<float>(r * k + j) / double(k);
    for (int64_t j = 0; j < k; ++j) var += std::pow(in.at<float>(r * k + j) - mean, 2) / double(k);
    for (int64_t j = 0; j < k; ++j)
      x[j] = c.layernorm ? (in.at<float>(r * k + j) - mean) / std::sqrt(var + eps) * gamma.at<float>(j) + beta.at<float>(j)
                         : in.at<float>(r * k + j);
    for (int64_t o = 0; o < n; ++o) {
      double v = c.bias ? b.at<float>(o) : 0.0;
      for (int64_t j = 0; j < k; ++j) v += x[j] * w.at<float>(o * k + j);
      switch (c.epilogue) {
        case ops::DecodeEpilogue::gelu_tanh:
          v = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
          break;
        case ops::DecodeEpilogue::gelu_erf: v = 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); break;
        case ops::DecodeEpilogue::residual_add: v += residual.at<float>(r * n + o); break;
        case ops::DecodeEpilogue::none: break;
      }
      EXPECT_NEAR(out.at<float>(r * n + o), v, 1e-4 * (1 + std::fabs(v))) << "row " << r << " col " << o;
    }
  }
}

TEST(OpsDecodeLinear, CpuPathEqualsHandComputedLayerNormLinearAndEpilogue) {
  using E = ops::DecodeEpilogue;
  for (bool layernorm : {false, true})
    for (bool bias : {false, true})
      for (E e : {E::none, E::gelu_tanh, E::gelu_erf, E::residual_add}) expect_matches_hand_computed({layernorm, bias, e});
}

TEST(OpsDecodeLinear, RejectsBadArguments) {
  OwnedTensor in(DType::f32, {2, 8}), w(DType::f32, {4, 8}), out(DType::f32, {2, 4}), wrong(DType::f32, {2, 5}),
      gamma(DType::f32, {8});
  Arena arena(size_t(1) << 20, Device::cpu());
  ops::DecodeLinear d;
  d.weight = w;
  EXPECT_THROW(ops::decode_linear_forward(arena, in, d, wrong), Error);  // out shape
  d.epilogue = ops::DecodeEpilogue::residual_add;
  EXPECT_THROW(ops::decode_linear_forward(arena, in, d, out), Error);  // no residual
  d.residual = out;
  EXPECT_THROW(ops::decode_linear_forward(arena, in, d, out), Error);  // out aliases the residual
  d = {};
  d.weight = w;
  d.ln_weight = gamma;  // no ln_bias
  EXPECT_THROW(ops::decode_linear_forward(arena, in, d, out), Error);
}

}  // namespace
}  // namespace tessera
