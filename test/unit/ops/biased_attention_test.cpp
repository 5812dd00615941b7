// Biased attention (ops/biased_attention.h, T5's core attention) and the relative position bias
// table (ops/relative_position_bias.h): gradients of q, k, v and the additive bias against central
// finite differences in float64 — self-attention (causal and bidirectional) and cross-attention
// with sq != sk, a key padding mask and attention dropout; the bias table's scatter-add backward;
// the GeGLU and ReLU activations' derivatives.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tessera/core/rng.h"
#include "tessera/ops/activation.h"
#include "tessera/ops/biased_attention.h"
#include "tessera/ops/relative_position_bias.h"
#include "tessera/ops/swiglu.h"

namespace tessera {
namespace {

std::vector<double> randoms(size_t n, uint64_t seed) {
  RandomStream stream(seed, 3);
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = stream.normal(i);
  return v;
}

struct Case {
  int64_t sq, sk;
  bool causal;
  double dropout;
};

class BiasedAttentionGradient : public ::testing::TestWithParam<Case> {};

TEST_P(BiasedAttentionGradient, MatchesFiniteDifferences) {
  const Case c = GetParam();
  const int64_t b = 2, nh = 2, hn = 3, w = nh * hn;
  auto q = randoms(static_cast<size_t>(c.sq * b * w), 1), k = randoms(static_cast<size_t>(c.sk * b * w), 2),
       v = randoms(static_cast<size_t>(c.sk * b * w), 3), bias = randoms(static_cast<size_t>(nh * c.sq * c.sk), 4),
       weights = randoms(static_cast<size_t>(c.sq * b * w), 5);
  std::vector<uint8_t> pad(static_cast<size_t>(b * c.sk), 1);
  pad[static_cast<size_t>(c.sk - 1)] = 0;  // sample 0's last key is padding
  ops::BiasedAttentionParams p;
  p.batch = b;
  p.num_heads = nh;
  p.head_dim = hn;
  p.causal = c.causal;
  p.dropout = c.dropout;
  const RandomStream stream(9, 9);
  auto T = [](std::vector<double>& x, Shape s) { return Tensor(x.data(), DType::f64, std::move(s)); };
  std::vector<double> out(q.size()), probs(static_cast<size_t>(b * nh * c.sq * c.sk));
  auto loss = [&]() {
    ops::biased_attention_forward(T(q, {c.sq * b, w}), T(k, {c.sk * b, w}), T(v, {c.sk * b, w}),
                                  T(bias, {nh, c.sq, c.sk}), Tensor(pad.data(), DType::u8, {b, c.sk}), p, stream,
                                  T(out, {c.sq * b, w}), T(probs, {b, nh, c.sq, c.sk}));
    double sum = 0;
    for (size_t i = 0; i < out.size(); ++i) sum += out[i] * weights[i];
    return sum;
  };
  loss();
  for (int64_t bi = 0; bi < b; ++bi)  // the padded key gets no probability
    for (int64_t h = 0; h < nh; ++h)
      for (int64_t i = 0; i < c.sq; ++i)
        if (bi == 0) EXPECT_EQ(probs[static_cast<size_t>(((bi * nh + h) * c.sq + i) * c.sk + c.sk - 1)], 0.0);
  std::vector<double> dq(q.size()), dk(k.size()), dv(v.size()), dbias(bias.size(), 0.25);
  ops::biased_attention_backward(T(weights, {c.sq * b, w}), T(q, {c.sq * b, w}), T(k, {c.sk * b, w}),
                                 T(v, {c.sk * b, w}), T(probs, {b, nh, c.sq, c.sk}), p, stream, T(dq, {c.sq * b, w}),
                                 T(dk, {c.sk * b, w}), T(dv, {c.sk * b, w}), T(dbias, {nh, c.sq, c.sk}));
  for (double& x : dbias) x -= 0.25;  // dbias accumulates
  const double eps = 1e-6;
  auto check = [&](std::vector<double>& x, const std::vector<double>& grad, const char* what) {
    for (size_t i = 0; i < x.size(); ++i) {
      const double saved = x[i];
      x[i] = saved + eps;
      const double up = loss();
      x[i] = saved - eps;
      const double down = loss();
      x[i] = saved;
      const double numeric = (up - down) / (2 * eps);
      EXPECT_NEAR(grad[i], numeric, 1e-7 + 1e-6 * std::abs(numeric)) << what << "[" << i << "]";
    }
  };
  check(q, dq, "dq");
  check(k, dk, "dk");
  check(v, dv, "dv");
  check(bias, dbias, "dbias");
}

INSTANTIATE_TEST_SUITE_P(Cases, BiasedAttentionGradient,
                         ::testing::Values(Case{5, 5, false, 0.0}, Case{5, 5, true, 0.0}, Case{3, 6, false, 0.0},
                                           Case{4, 4, true, 0.3}, Case{3, 5, false, 0.3}),
                         [](const auto& info) {
                           const Case& c = info.param;
                           return (c.sq == c.sk ? std::string("Self") : std::string("Cross")) +
                                  (c.causal ? "Causal" : "Bidirectional") + (c.dropout > 0 ? "Dropout" : "");
                         });

TEST(RelativePositionBias, BackwardScatterAddsIntoTheBuckets) {
  const int64_t nb = 8, nh = 3, sq = 4, sk = 5;
  std::vector<int32_t> buckets = ops::relative_position_buckets(sq, sk, 0, true, nb, 6);
  auto weight = randoms(static_cast<size_t>(nb * nh), 1), dbias = randoms(static_cast<size_t>(nh * sq * sk), 2);
  std::vector<double> out(static_cast<size_t>(nh * sq * sk)), dweight(static_cast<size_t>(nb * nh), 0.0);
  Tensor bk(buckets.data(), DType::i32, {sq, sk});
  ops::relative_position_bias_forward(Tensor(weight.data(), DType::f64, {nb, nh}), bk,
                                      Tensor(out.data(), DType::f64, {nh, sq, sk}));
  ops::relative_position_bias_backward(Tensor(dbias.data(), DType::f64, {nh, sq, sk}), bk,
                                       Tensor(dweight.data(), DType::f64, {nb, nh}));
  // The bias is linear in the table: d(sum dbias . bias) / d weight[n, h] = sum of dbias over bucket n.
  for (int64_t n = 0; n < nb; ++n)
    for (int64_t h = 0; h < nh; ++h) {
      double expected = 0;
      for (int64_t i = 0; i < sq * sk; ++i)
        if (buckets[static_cast<size_t>(i)] == n) expected += dbias[static_cast<size_t>(h * sq * sk + i)];
      EXPECT_NEAR(dweight[static_cast<size_t>(n * nh + h)], expected, 1e-12);
    }
  for (int64_t h = 0; h < nh; ++h)
    for (int64_t i = 0; i < sq * sk; ++i)
      EXPECT_EQ(out[static_cast<size_t>(h * sq * sk + i)], weight[static_cast<size_t>(buckets[static_cast<size_t>(i)] * nh + h)]);
}

TEST(GegluAndRelu, DerivativesMatchFiniteDifferences) {
  auto in = randoms(16, 7), dout = randoms(8, 8);
  std::vector<double> out(8), din(16);
  auto f = [&]() {
    ops::geglu_forward(Tensor(in.data(), DType::f64, {2, 8}), Tensor(out.data(), DType::f64, {2, 4}));
    double s = 0;
    for (size_t i = 0; i < out.size(); ++i) s += out[i] * dout[i];
    return s;
  };
  ops::geglu_backward(Tensor(dout.data(), DType::f64, {2, 4}), Tensor(in.data(), DType::f64, {2, 8}),
                      Tensor(din.data(), DType::f64, {2, 8}));
  for (size_t i = 0; i < in.size(); ++i) {
    const double saved = in[i];
    in[i] = saved + 1e-6;
    const double up = f();
    in[i] = saved - 1e-6;
    const double down = f();
    in[i] = saved;
    EXPECT_NEAR(din[i], (up - down) / 2e-6, 1e-7) << "geglu din[" << i << "]";
  }
  std::vector<double> x = {-1.5, -0.1, 0.2, 3.0}, y(4), dy = {1, 2, 3, 4}, dx(4);
  ops::activation_forward(ops::Activation::relu, Tensor(x.data(), DType::f64, {4}), Tensor(y.data(), DType::f64, {4}));
  ops::activation_backward(ops::Activation::relu, Tensor(dy.data(), DType::f64, {4}), Tensor(x.data(), DType::f64, {4}),
                           Tensor(dx.data(), DType::f64, {4}));
  EXPECT_EQ(y, (std::vector<double>{0, 0, 0.2, 3.0}));
  EXPECT_EQ(dx, (std::vector<double>{0, 0, 3, 4}));
}

}  // namespace
}  // namespace tessera
