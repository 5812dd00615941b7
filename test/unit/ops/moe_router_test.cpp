// The MoE router, its auxiliary losses, capacity dropping and the token permutation (ops/moe_*.h):
// hand-computed values (the arithmetic is in the comments), determinism, and finite-difference
// gradients.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "op_test_util.h"
#include "tessera/ops/moe_aux_loss.h"
#include "tessera/ops/moe_capacity.h"
#include "tessera/ops/moe_permute.h"
#include "tessera/ops/moe_router.h"

namespace tessera {
namespace {

using test::OwnedTensor;

// Two tokens, four experts. Token 1 ties experts 0 and 1 (the lower index wins).
OwnedTensor two_token_logits() {
  OwnedTensor l(DType::f32, {2, 4});
  const float v[] = {1, 3, 2, 0, 0.5f, 0.5f, 0, -1};
  std::copy(v, v + 8, l.data<float>());
  return l;
}

TEST(MoeRouter, TopKChoiceAndProbabilitiesByScoreFunction) {
  OwnedTensor l = two_token_logits();
  // softmax after top-k: token 0 picks experts 1 (logit 3) and 2 (logit 2);
  // probs = softmax([3, 2]) = [e^3, e^2] / (e^3 + e^2) = [1 / (1 + e^-1), ...] = [0.7310586, 0.2689414].
  ops::Routing r = ops::moe_router_forward(l, {2, ops::RouterScore::softmax, false});
  EXPECT_EQ(r.experts, (std::vector<int32_t>{1, 2, 0, 1}));
  EXPECT_NEAR(r.probs[0], 0.7310586, 1e-6);
  EXPECT_NEAR(r.probs[1], 0.2689414, 1e-6);
  EXPECT_NEAR(r.probs[2], 0.5, 1e-7);  // token 1: softmax([0.5, 0.5])
  EXPECT_NEAR(r.probs[3], 0.5, 1e-7);
  EXPECT_EQ(r.routed_per_expert(), (std::vector<int64_t>{1, 2, 1, 0}));
  // pre-softmax: softmax over all four, Z = e^1 + e^3 + e^2 + e^0 = 2.7182818 + 20.0855369 + 7.3890561
  // + 1 = 31.1928748; probs = e^3 / Z = 0.6439143, e^2 / Z = 0.2368828 (not renormalised).
  ops::Routing pre = ops::moe_router_forward(l, {2, ops::RouterScore::softmax, true});
  EXPECT_EQ(pre.experts, r.experts);
  EXPECT_NEAR(pre.probs[0], 0.6439143, 1e-6);
  EXPECT_NEAR(pre.probs[1], 0.2368828, 1e-6);
  // sigmoid: s(3) = 0.9525741, s(2) = 0.8807971, probs = s / (s(3) + s(2)) = 0.9525741 / 1.8333712 = 0.5195752.
  ops::Routing sig = ops::moe_router_forward(l, {2, ops::RouterScore::sigmoid, false});
  EXPECT_EQ(sig.experts, r.experts);
  EXPECT_NEAR(sig.probs[0], 0.5195752, 1e-6);
  EXPECT_NEAR(sig.probs[0] + sig.probs[1], 1.0, 1e-6);
  // top-1 sigmoid: the chosen sigmoid itself.
  ops::Routing one = ops::moe_router_forward(l, {1, ops::RouterScore::sigmoid, false});
  EXPECT_EQ(one.experts, (std::vector<int32_t>{1, 0}));
  EXPECT_NEAR(one.probs[0], 0.9525741, 1e-6);
  EXPECT_THROW(ops::moe_router_forward(l, {5, ops::RouterScore::softmax, false}), Error);
}

TEST(MoeAuxLoss, LoadBalancingAndZLossHandComputed) {
  OwnedTensor l = two_token_logits();
  const std::vector<int64_t> counts{1, 2, 1, 0};  // the top-2 choices above
  // softmax rows: token 0: [e^1, e^3, e^2, e^0] / 31.1928748 = [0.0871443, 0.6439143, 0.2368828, 0.0320586];
  // token 1: [e^.5, e^.5, e^0, e^-1] / (2 x 1.6487213 + 1 + 0.3678794 = 4.6653220) = [0.3534039, 0.3534039,
  // 0.2143478, 0.0788532]. Column sums [0.4405482, 0.9973182, 0.4512306, 0.1109118];
  // sum_i col_i c_i = 0.4405482 + 2 x 0.9973182 + 0.4512306 = 2.8864152; x E / (k T^2) = 4 / (2 x 4) = 0.5
  // -> 1.4432076 (1.4432004 with the unrounded terms).
  EXPECT_NEAR(ops::moe_aux_loss_forward(l, counts, 2, ops::RouterScore::softmax), 1.4432004, 1e-5);
  // sigmoid: scores = sigmoid / row sum; the same counts -> 1.1616143.
  EXPECT_NEAR(ops::moe_aux_loss_forward(l, counts, 2, ops::RouterScore::sigmoid), 1.1616143, 1e-5);
  // perfectly balanced: equal logits (scores 1/2), counts T k / E each -> 1: T = 4, k = 1:
  // column sums 2, 2; sum col c = 2 x 2 + 2 x 2 = 8; x E / (k T^2) = 2 / 16 -> 1.
  OwnedTensor flat(DType::f32, {4, 2});
  EXPECT_NEAR(ops::moe_aux_loss_forward(flat, std::vector<int64_t>{2, 2}, 1, ops::RouterScore::softmax), 1.0, 1e-7);
  // Imbalanced: logits favouring expert 0 (scores 0.9, 0.1 per token) and every token on expert 0
  // (counts {4, 0}): column sums 3.6, 0.4; sum col c = 3.6 x 4 = 14.4; x 2 / 16 -> 1.8.
  OwnedTensor skewed(DType::f32, {4, 2});
  for (int t = 0; t < 4; ++t) skewed.at<float>(2 * t) = static_cast<float>(std::log(9.0));  // softmax -> 0.9, 0.1
  EXPECT_NEAR(ops::moe_aux_loss_forward(skewed, std::vector<int64_t>{4, 0}, 1, ops::RouterScore::softmax), 1.8, 1e-6);
  EXPECT_NEAR(ops::moe_aux_loss_forward(flat, std::vector<int64_t>{4, 4}, 2, ops::RouterScore::softmax), 1.0, 1e-7);
  // z-loss: lse(token 0) = ln 31.1928748 = 3.4401897, lse(token 1) = ln 4.6653220 = 1.5401580;
  // (3.4401897^2 + 1.5401580^2) / 2 = (11.8349051 + 2.3720867) / 2 = 7.1034959 (7.1034941 unrounded).
  EXPECT_NEAR(ops::moe_z_loss_forward(l), 7.1034941, 1e-5);
}

// Central differences of a scalar function of f32 logits against the analytic gradient.
void expect_gradient(const OwnedTensor& logits, const std::function<double()>& loss, const OwnedTensor& analytic,
                     const char* what) {
  const double eps = 1e-2;
  for (int64_t i = 0; i < logits.numel(); ++i) {
    const float saved = logits.at<float>(i);
    logits.at<float>(i) = saved + static_cast<float>(eps);
    const double up = loss();
    logits.at<float>(i) = saved - static_cast<float>(eps);
    const double down = loss();
    logits.at<float>(i) = saved;
    const double fd = (up - down) / (2 * eps);
    EXPECT_NEAR(analytic.at<float>(i), fd, 2e-3 + 2e-3 * std::fabs(fd)) << what << " element " << i;
  }
}

TEST(MoeAuxLoss, GradientsMatchFiniteDifferences) {
  OwnedTensor l(DType::f32, {5, 4});
  test::fill_normal(l, 7);
  const std::vector<int64_t> counts{3, 4, 1, 2};
  for (ops::RouterScore score : {ops::RouterScore::softmax, ops::RouterScore::sigmoid}) {
    OwnedTensor d(DType::f32, {5, 4});
    ops::moe_aux_loss_backward(l, counts, 2, score, 3.0, d);
    expect_gradient(l, [&] { return 3.0 * ops::moe_aux_loss_forward(l, counts, 2, score); }, d, "aux loss");
  }
  OwnedTensor dz(DType::f32, {5, 4});
  ops::moe_z_loss_backward(l, 0.5, dz);
  expect_gradient(l, [&] { return 0.5 * ops::moe_z_loss_forward(l); }, dz, "z-loss");
}

TEST(MoeRouter, GradientsMatchFiniteDifferences) {
  OwnedTensor l(DType::f32, {6, 5});
  test::fill_normal(l, 11);
  const ops::RouterOptions cases[] = {{2, ops::RouterScore::softmax, false},
                                      {3, ops::RouterScore::softmax, true},
                                      {2, ops::RouterScore::sigmoid, false},
                                      {1, ops::RouterScore::sigmoid, false}};
  for (const ops::RouterOptions& o : cases) {
    const ops::Routing r = ops::moe_router_forward(l, o);
    std::vector<float> w(r.probs.size());
    for (size_t i = 0; i < w.size(); ++i) w[i] = 0.3f + 0.1f * static_cast<float>(i % 7);
    // loss = sum_slots w_slot probs_slot with the routing held fixed (FD steps do not flip the top-k
    // here: the logits' gaps exceed the step).
    auto loss = [&] {
      ops::Routing now = ops::moe_router_forward(l, o);
      EXPECT_EQ(now.experts, r.experts);
      double s = 0;
      for (size_t i = 0; i < w.size(); ++i) s += w[i] * now.probs[i];
      return s;
    };
    OwnedTensor d(DType::f32, {6, 5});
    ops::moe_router_backward(l, r, o, w, d);
    expect_gradient(l, loss, d, "router");
  }
}

TEST(MoeRouter, DeterministicPerSeed) {
  OwnedTensor a(DType::f32, {64, 8}), b(DType::f32, {64, 8}), c(DType::f32, {64, 8});
  test::fill_normal(a, 3);
  test::fill_normal(b, 3);
  test::fill_normal(c, 4);
  const ops::RouterOptions o{2, ops::RouterScore::softmax, false};
  ops::Routing ra = ops::moe_router_forward(a, o), rb = ops::moe_router_forward(b, o), rc = ops::moe_router_forward(c, o);
  EXPECT_EQ(ra.experts, rb.experts);
  EXPECT_EQ(ra.probs, rb.probs);
  EXPECT_NE(ra.experts, rc.experts);
}

TEST(MoeCapacity, DropsTheLowestProbabilitiesHandComputed) {
  // Four tokens, two experts, top-1, pre-softmax probs: logits [2,0] [1,0] [3,0] [0,1] -> experts
  // 0, 0, 0, 1 with probs s(2) = 0.8807971, s(1) = 0.7310586, s(3) = 0.9525741, s(1) = 0.7310586.
  // C = ceil(T k / E x 1.0) = ceil(4 x 1 / 2) = 2: expert 0 keeps tokens 2 and 0 and drops token 1.
  OwnedTensor l(DType::f32, {4, 2});
  const float v[] = {2, 0, 1, 0, 3, 0, 0, 1};
  std::copy(v, v + 8, l.data<float>());
  ops::Routing r = ops::moe_router_forward(l, {1, ops::RouterScore::softmax, true});
  EXPECT_EQ(r.experts, (std::vector<int32_t>{0, 0, 0, 1}));
  const int64_t capacity = ops::moe_expert_capacity(4, 1, 2, 1.0);
  EXPECT_EQ(capacity, 2);
  EXPECT_EQ(ops::moe_drop_over_capacity(r, capacity), 1);
  EXPECT_EQ(r.kept, (std::vector<uint8_t>{1, 0, 1, 1}));
  EXPECT_EQ(r.probs[1], 0.0f);
  EXPECT_NEAR(r.probs[0], 0.8807971, 1e-6);
  EXPECT_EQ(r.kept_per_expert(), (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(r.routed_per_expert(), (std::vector<int64_t>{3, 1}));
  // Capacity 1.5 x: ceil(4 x 1 / 2 x 1.5) = 3, nothing dropped; a huge factor is clamped to T.
  EXPECT_EQ(ops::moe_expert_capacity(4, 1, 2, 1.5), 3);
  EXPECT_EQ(ops::moe_expert_capacity(4, 2, 2, 10.0), 4);
  // Padding to capacity: each expert's block has 2 rows; expert 1's second is a zero row.
  ops::Permutation p = ops::moe_make_permutation(r, capacity);
  EXPECT_EQ(p.rows_per_expert, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(p.row_slot, (std::vector<int64_t>{0, 2, 3, -1}));
}

TEST(MoePermute, SortsByExpertAndCombinesWeighted) {
  OwnedTensor l = two_token_logits();
  ops::Routing r = ops::moe_router_forward(l, {2, ops::RouterScore::softmax, false});
  ops::Permutation p = ops::moe_make_permutation(r);
  // slots: (t0: e1, e2), (t1: e0, e1) -> expert 0: slot 2; expert 1: slots 0, 3; expert 2: slot 1.
  EXPECT_EQ(p.row_slot, (std::vector<int64_t>{2, 0, 3, 1}));
  EXPECT_EQ(p.rows_per_expert, (std::vector<int64_t>{1, 2, 1, 0}));
  EXPECT_EQ(p.first_row(2), 3);
  OwnedTensor x(DType::f32, {2, 3}), out(DType::f32, {4, 3}), y(DType::f32, {2, 3});
  for (int i = 0; i < 6; ++i) x.at<float>(i) = static_cast<float>(i + 1);
  ops::moe_permute_forward(x, p, out);
  EXPECT_EQ(out.at<float>(0), 4.0f);  // row 0 = token 1
  EXPECT_EQ(out.at<float>(3), 1.0f);  // row 1 = token 0
  // Identity experts: y = sum of the token's probs x itself = x (the probs sum to 1).
  ops::moe_unpermute_forward(out, p, r.probs, y);
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(y.at<float>(i), x.at<float>(i), 1e-6);
}

TEST(MoePermute, GradientsMatchFiniteDifferences) {
  OwnedTensor l(DType::f32, {5, 4});
  test::fill_normal(l, 5);
  ops::Routing r = ops::moe_router_forward(l, {2, ops::RouterScore::softmax, false});
  ops::moe_drop_over_capacity(r, 2);  // some slots dropped
  ops::Permutation p = ops::moe_make_permutation(r, 3);
  const int64_t h = 3;
  OwnedTensor x(DType::f32, {5, h}), rows(DType::f32, {p.rows(), h}), dy(DType::f32, {5, h});
  test::fill_normal(x, 6);
  test::fill_normal(dy, 8);
  // out = unpermute(permute(x) * c_row, probs), c_row a per-row factor (an "expert"); loss = <dy, out>.
  auto forward = [&](std::vector<float>& probs) {
    OwnedTensor perm(DType::f32, {p.rows(), h}), y(DType::f32, {5, h});
    ops::moe_permute_forward(x, p, perm);
    for (int64_t i = 0; i < perm.numel(); ++i) perm.at<float>(i) *= 1.0f + 0.25f * static_cast<float>(i / h);
    ops::moe_unpermute_forward(perm, p, probs, y);
    double s = 0;
    for (int64_t i = 0; i < y.numel(); ++i) s += static_cast<double>(y.at<float>(i)) * dy.at<float>(i);
    return s;
  };
  OwnedTensor perm(DType::f32, {p.rows(), h}), dperm(DType::f32, {p.rows(), h}), dx(DType::f32, {5, h});
  ops::moe_permute_forward(x, p, perm);
  for (int64_t i = 0; i < perm.numel(); ++i) perm.at<float>(i) *= 1.0f + 0.25f * static_cast<float>(i / h);
  std::vector<float> dprobs(r.probs.size());
  ops::moe_unpermute_backward(dy, perm, p, r.probs, dperm, dprobs);
  for (int64_t i = 0; i < dperm.numel(); ++i) dperm.at<float>(i) *= 1.0f + 0.25f * static_cast<float>(i / h);
  ops::moe_permute_backward(dperm, p, dx);
  expect_gradient(x, [&] { return forward(r.probs); }, dx, "permute x");
  const double eps = 1e-2;
  for (size_t s = 0; s < r.probs.size(); ++s) {
    std::vector<float> up = r.probs, down = r.probs;
    up[s] += static_cast<float>(eps);
    down[s] -= static_cast<float>(eps);
    const double fd = (forward(up) - forward(down)) / (2 * eps);
    EXPECT_NEAR(dprobs[s], r.kept[s] ? fd : 0.0, 2e-3 + 2e-3 * std::fabs(fd)) << "probs slot " << s;
  }
}

}  // namespace
}  // namespace tessera
