// ALiBi: slopes as Press et al. / BLOOM define them (powers of two and not), and the bias inside the
// unfused attention (forward against a naive loop, backward against finite differences) and the
// CPU fused-attention reference (forward and backward equal the unfused path); a TP slice of the
// heads takes the slopes of the global heads it holds.
#include "tessera/ops/alibi.h"

#include <cmath>
#include <limits>

#include "op_test_util.h"
#include "tessera/ops/attention.h"
#include "tessera/ops/flash_attention.h"

namespace tessera {
namespace {

using test::OwnedTensor;

// BLOOM's build_alibi_tensor slopes, written out as in transformers (get_slopes of the ALiBi repo).
std::vector<double> bloom_slopes(int64_t n) {
  auto power_of_2 = [](int64_t k) {
    std::vector<double> s;
    const double start = std::pow(2.0, -std::pow(2.0, -(std::log2(double(k)) - 3)));
    for (int64_t i = 0; i < k; ++i) s.push_back(start * std::pow(start, double(i)));
    return s;
  };
  const int64_t closest = int64_t(1) << static_cast<int>(std::floor(std::log2(double(n))));
  std::vector<double> slopes = power_of_2(closest);
  if (closest != n) {
    const std::vector<double> extra = power_of_2(2 * closest);
    for (int64_t i = 0; i < n - closest; ++i) slopes.push_back(extra[static_cast<size_t>(2 * i)]);
  }
  return slopes;
}

TEST(OpsAlibi, SlopesMatchPressAndBloomForAnyHeadCount) {
  EXPECT_DOUBLE_EQ(ops::alibi_slope(0, 8), 0.5);  // 2^-1 ... 2^-8 for 8 heads
  EXPECT_DOUBLE_EQ(ops::alibi_slope(7, 8), 1.0 / 256);
  for (int64_t n : {1, 2, 3, 4, 5, 6, 8, 12, 16, 20, 25, 32, 40, 96}) {
    const std::vector<double> expected = bloom_slopes(n), ours = ops::alibi_slopes(n);
    ASSERT_EQ(ours.size(), expected.size()) << n;
    for (int64_t h = 0; h < n; ++h) EXPECT_NEAR(ours[h], expected[h], 1e-13 * expected[h]) << n << " " << h;
  }
  const std::vector<double> slice = ops::alibi_slopes(12, 6, 3);  // TP rank 2 of 4 holds heads 6..8
  for (int64_t h = 0; h < 3; ++h) EXPECT_EQ(slice[h], ops::alibi_slope(6 + h, 12));
  test::expect_error_containing([] { ops::alibi_slopes(8, 6, 3); }, {"alibi_slopes", "outside"});
}

struct Case {
  int64_t s, b, na, ng, hn;
  bool causal;
};

ops::AttentionParams alibi_params(const Case& c, int64_t total_heads = 0, int64_t first = 0) {
  ops::AttentionParams p;
  p.num_heads = c.na, p.num_query_groups = c.ng, p.head_dim = c.hn, p.causal = c.causal;
  p.alibi = true, p.alibi_heads = total_heads, p.alibi_first_head = first;
  return p;
}

TEST(OpsAlibi, UnfusedForwardAddsTheLinearBias) {
  const Case c{6, 2, 3, 3, 4, true};  // 3 heads: a non-power-of-two head count
  const int64_t width = (c.na + 2 * c.ng) * c.hn;
  OwnedTensor qkv(DType::f64, {c.s, c.b, width}), out(DType::f64, {c.s, c.b, c.na * c.hn});
  OwnedTensor probs(DType::f64, {c.b, c.na, c.s, c.s});
  test::fill_normal(qkv, 11);
  ops::attention_forward(qkv, Tensor(), alibi_params(c), RandomStream(0, 0), out, probs);
  auto at = [&](int64_t t, int64_t bi, int64_t col) { return qkv.at<double>((t * c.b + bi) * width + col); };
  for (int64_t bi = 0; bi < c.b; ++bi)
    for (int64_t h = 0; h < c.na; ++h) {
      const int64_t q_col = h * 3 * c.hn, k_col = q_col + c.hn;
      for (int64_t i = 0; i < c.s; ++i) {
        std::vector<double> e(static_cast<size_t>(i + 1));
        double total = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < c.hn; ++d) dot += at(i, bi, q_col + d) * at(j, bi, k_col + d);
          e[j] = std::exp(dot / 2.0 - ops::alibi_slope(h, c.na) * double(i - j));
          total += e[j];
        }
        for (int64_t j = 0; j <= i; ++j)
          EXPECT_NEAR(probs.at<double>(((bi * c.na + h) * c.s + i) * c.s + j), e[j] / total, 1e-13);
      }
    }
}

void expect_backward_matches_fd(const Case& c) {
  const int64_t width = (c.na + 2 * c.ng) * c.hn;
  OwnedTensor qkv(DType::f64, {c.s, c.b, width}), out(DType::f64, {c.s, c.b, c.na * c.hn});
  OwnedTensor probs(DType::f64, {c.b, c.na, c.s, c.s}), dout(DType::f64, {c.s, c.b, c.na * c.hn});
  OwnedTensor dqkv(DType::f64, {c.s, c.b, width});
  test::fill_normal(qkv, 12);
  test::fill_normal(dout, 13);
  const auto p = alibi_params(c);
  auto loss = [&] {
    ops::attention_forward(qkv, Tensor(), p, RandomStream(0, 0), out, probs);
    return test::dot(out, dout);
  };
  loss();
  ops::attention_backward(dout, qkv, probs, p, RandomStream(0, 0), dqkv);
  test::expect_gradient_matches(loss, qkv, test::values_of(dqkv), "dqkv (ALiBi)");
}

TEST(OpsAlibi, UnfusedBackwardMatchesFiniteDifferencesCausalGqa) { expect_backward_matches_fd({5, 2, 4, 2, 3, true}); }
TEST(OpsAlibi, UnfusedBackwardMatchesFiniteDifferencesBidirectional) { expect_backward_matches_fd({4, 1, 3, 1, 2, false}); }

// The CPU fused reference with ALiBi equals the unfused path (out, and dqkv through the lse).
TEST(OpsAlibi, FlashReferenceEqualsUnfused) {
  const Case c{7, 2, 6, 2, 4, true};
  const int64_t width = (c.na + 2 * c.ng) * c.hn;
  OwnedTensor qkv(DType::f64, {c.s, c.b, width}), out(DType::f64, {c.s, c.b, c.na * c.hn});
  OwnedTensor probs(DType::f64, {c.b, c.na, c.s, c.s}), flash_out(DType::f64, {c.s, c.b, c.na * c.hn});
  OwnedTensor lse(DType::f64, {c.b, c.na, c.s}), dout(DType::f64, {c.s, c.b, c.na * c.hn});
  OwnedTensor dqkv(DType::f64, {c.s, c.b, width}), flash_dqkv(DType::f64, {c.s, c.b, width});
  test::fill_normal(qkv, 14, 2.0);
  test::fill_normal(dout, 15);
  const auto p = alibi_params(c, 12, 6);  // this call's heads are global heads 6..11 of 12
  ops::attention_forward(qkv, Tensor(), p, RandomStream(0, 0), out, probs);
  ops::attention_backward(dout, qkv, probs, p, RandomStream(0, 0), dqkv);
  ops::flash_attention_forward(qkv, Tensor(), p, flash_out, lse);
  ops::flash_attention_backward(dout, qkv, flash_out, lse, Tensor(), p, flash_dqkv);
  for (int64_t i = 0; i < out.numel(); ++i) EXPECT_NEAR(flash_out.at<double>(i), out.at<double>(i), 1e-12);
  for (int64_t i = 0; i < dqkv.numel(); ++i) EXPECT_NEAR(flash_dqkv.at<double>(i), dqkv.at<double>(i), 1e-11);
  // Without ALiBi the result differs (the bias is really applied).
  auto plain = p;
  plain.alibi = false;
  ops::flash_attention_forward(qkv, Tensor(), plain, flash_out, lse);
  double diff = 0;
  for (int64_t i = 0; i < out.numel(); ++i) diff = std::max(diff, std::abs(flash_out.at<double>(i) - out.at<double>(i)));
  EXPECT_GT(diff, 1e-3);
}

}  // namespace
}  // namespace tessera
