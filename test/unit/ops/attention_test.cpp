// Core attention: forward against a naive loop over the Megatron per-query-group QKV layout (causal,
// key padding, GQA/MQA, dropout), fully masked rows, f32 vs f64, and backward against finite
// differences in f64 for each of those configurations.
#include "tessera/ops/attention.h"

#include <limits>

#include "op_test_util.h"

namespace tessera {
namespace {

using test::OwnedTensor;

struct Config {
  int64_t s, b, na, ng, hn;
  bool causal;
  double dropout;
  bool padding;
};

ops::AttentionParams params_of(const Config& c) {
  ops::AttentionParams p;
  p.num_heads = c.na;
  p.num_query_groups = c.ng;
  p.head_dim = c.hn;
  p.causal = c.causal;
  p.dropout = c.dropout;
  return p;
}

// Key padding: batch element 1 masks keys 0 and 3 (so with a causal mask its query 0 sees no key).
void fill_padding(const OwnedTensor& mask, const Config& c) {
  for (int64_t bi = 0; bi < c.b; ++bi)
    for (int64_t j = 0; j < c.s; ++j) mask.at<uint8_t>(bi * c.s + j) = !(bi == 1 && (j == 0 || j == 3));
}

// out [s, b, na hn] and probs [b, na, s, s] by the definition, in double.
void naive_attention(const OwnedTensor& qkv, const uint8_t* padding, const Config& c, const RandomStream& stream,
                     std::vector<double>& out, std::vector<double>& probs) {
  const int64_t per_group = c.na / c.ng, width = (c.na + 2 * c.ng) * c.hn;
  auto at = [&](int64_t t, int64_t bi, int64_t column) { return qkv.at<double>((t * c.b + bi) * width + column); };
  out.assign(static_cast<size_t>(c.s * c.b * c.na * c.hn), 0.0);
  probs.assign(static_cast<size_t>(c.b * c.na * c.s * c.s), 0.0);
  for (int64_t bi = 0; bi < c.b; ++bi)
    for (int64_t h = 0; h < c.na; ++h) {
      const int64_t g = h / per_group;
      const int64_t q_col = g * (per_group + 2) * c.hn + (h % per_group) * c.hn;
      const int64_t k_col = g * (per_group + 2) * c.hn + per_group * c.hn, v_col = k_col + c.hn;
      for (int64_t i = 0; i < c.s; ++i) {
        std::vector<double> score(c.s, -std::numeric_limits<double>::infinity());
        double top = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < c.s; ++j) {
          if ((c.causal && j > i) || (padding && !padding[bi * c.s + j])) continue;
          double dot = 0;
          for (int64_t d = 0; d < c.hn; ++d) dot += at(i, bi, q_col + d) * at(j, bi, k_col + d);
          score[j] = dot / std::sqrt(double(c.hn));
          top = std::max(top, score[j]);
        }
        if (top == -std::numeric_limits<double>::infinity()) continue;  // no key: zeros
        double total = 0;
        for (int64_t j = 0; j < c.s; ++j) total += std::exp(score[j] - top);
        for (int64_t j = 0; j < c.s; ++j) {
          const int64_t flat = ((bi * c.na + h) * c.s + i) * c.s + j;
          const double prob = std::exp(score[j] - top) / total;
          probs[flat] = prob;
          const bool keep = c.dropout == 0 || stream.uniform_of_quarter(static_cast<uint64_t>(flat)) >= c.dropout;
          const double weight = keep ? prob / (1 - c.dropout) : 0.0;
          for (int64_t d = 0; d < c.hn; ++d) out[((i * c.b + bi) * c.na + h) * c.hn + d] += weight * at(j, bi, v_col + d);
        }
      }
    }
}

void expect_forward_matches_naive(const Config& c) {
  const int64_t width = (c.na + 2 * c.ng) * c.hn;
  OwnedTensor qkv(DType::f64, {c.s, c.b, width}), mask(DType::u8, {c.b, c.s});
  OwnedTensor out(DType::f64, {c.s, c.b, c.na * c.hn}), probs(DType::f64, {c.b, c.na, c.s, c.s});
  test::fill_normal(qkv, 1);
  fill_padding(mask, c);
  const RandomStream stream(5, 6);
  ops::attention_forward(qkv, c.padding ? mask.tensor() : Tensor(), params_of(c), stream, out, probs);
  std::vector<double> expected_out, expected_probs;
  naive_attention(qkv, c.padding ? mask.data<uint8_t>() : nullptr, c, stream, expected_out, expected_probs);
  for (int64_t i = 0; i < out.numel(); ++i) EXPECT_NEAR(out.at<double>(i), expected_out[i], 1e-12) << "out " << i;
  for (int64_t i = 0; i < probs.numel(); ++i)
    EXPECT_NEAR(probs.at<double>(i), expected_probs[i], 1e-13) << "probs " << i;
}

TEST(OpsAttention, ForwardMatchesNaiveLoops) {
  expect_forward_matches_naive({5, 2, 4, 2, 3, true, 0.0, true});    // causal + padding + GQA
  expect_forward_matches_naive({4, 3, 2, 2, 4, false, 0.0, false});  // MHA, no mask
  expect_forward_matches_naive({6, 2, 3, 1, 2, true, 0.25, true});   // MQA + dropout
  expect_forward_matches_naive({5, 2, 4, 2, 3, false, 0.5, true});   // padding only + dropout
}

TEST(OpsAttention, MaskedKeysGetExactlyZeroAndEmptyRowsGiveZeroOutput) {
  const Config c{5, 2, 2, 1, 3, true, 0.0, true};
  const int64_t width = (c.na + 2 * c.ng) * c.hn;
  OwnedTensor qkv(DType::f32, {c.s, c.b, width}), mask(DType::u8, {c.b, c.s});
  OwnedTensor out(DType::f32, {c.s, c.b, c.na * c.hn}), probs(DType::f32, {c.b, c.na, c.s, c.s});
  test::fill_normal(qkv, 2, 30.0);  // large scores: masked keys must still be exactly 0
  fill_padding(mask, c);
  ops::attention_forward(qkv, mask, params_of(c), RandomStream(1, 1), out, probs);
  for (int64_t bi = 0; bi < c.b; ++bi)
    for (int64_t h = 0; h < c.na; ++h)
      for (int64_t i = 0; i < c.s; ++i) {
        double row_sum = 0;
        for (int64_t j = 0; j < c.s; ++j) {
          const float p = probs.at<float>(((bi * c.na + h) * c.s + i) * c.s + j);
          const bool masked = j > i || (bi == 1 && (j == 0 || j == 3));
          if (masked) EXPECT_EQ(p, 0.0f) << bi << " " << h << " " << i << " " << j;
          row_sum += p;
        }
        const bool empty = bi == 1 && i == 0;
        EXPECT_NEAR(row_sum, empty ? 0.0 : 1.0, 1e-5);
        if (empty)
          for (int64_t d = 0; d < c.hn; ++d) EXPECT_EQ(out.at<float>(((i * c.b + bi) * c.na + h) * c.hn + d), 0.0f);
      }
}

TEST(OpsAttention, F32AgreesWithF64) {
  const Config c{16, 2, 4, 2, 8, true, 0.1, true};
  const int64_t width = (c.na + 2 * c.ng) * c.hn;
  OwnedTensor qkv(DType::f64, {c.s, c.b, width}), qkv32(DType::f32, {c.s, c.b, width}), mask(DType::u8, {c.b, c.s});
  OwnedTensor out(DType::f64, {c.s, c.b, c.na * c.hn}), probs(DType::f64, {c.b, c.na, c.s, c.s});
  OwnedTensor out32(DType::f32, {c.s, c.b, c.na * c.hn}), probs32(DType::f32, {c.b, c.na, c.s, c.s});
  test::fill_normal(qkv, 3);
  test::copy_to_f32(qkv, qkv32);
  fill_padding(mask, c);
  const RandomStream stream(9, 9);
  ops::attention_forward(qkv, mask, params_of(c), stream, out, probs);
  ops::attention_forward(qkv32, mask, params_of(c), stream, out32, probs32);
  for (int64_t i = 0; i < out.numel(); ++i) EXPECT_NEAR(out32.at<float>(i), out.at<double>(i), 2e-5);
  for (int64_t i = 0; i < probs.numel(); ++i) EXPECT_NEAR(probs32.at<float>(i), probs.at<double>(i), 2e-6);
  // Backward in both precisions agrees too.
  OwnedTensor dout(DType::f64, {c.s, c.b, c.na * c.hn}), dout32(DType::f32, {c.s, c.b, c.na * c.hn});
  test::fill_normal(dout, 4);
  test::copy_to_f32(dout, dout32);
  OwnedTensor dqkv(DType::f64, {c.s, c.b, width}), dqkv32(DType::f32, {c.s, c.b, width});
  ops::attention_backward(dout, qkv, probs, params_of(c), stream, dqkv);
  ops::attention_backward(dout32, qkv32, probs32, params_of(c), stream, dqkv32);
  for (int64_t i = 0; i < dqkv.numel(); ++i) EXPECT_NEAR(dqkv32.at<float>(i), dqkv.at<double>(i), 5e-5);
}

void expect_backward_matches_finite_differences(const Config& c) {
  const int64_t width = (c.na + 2 * c.ng) * c.hn;
  OwnedTensor qkv(DType::f64, {c.s, c.b, width}), mask(DType::u8, {c.b, c.s});
  OwnedTensor out(DType::f64, {c.s, c.b, c.na * c.hn}), probs(DType::f64, {c.b, c.na, c.s, c.s});
  OwnedTensor dout(DType::f64, {c.s, c.b, c.na * c.hn}), dqkv(DType::f64, {c.s, c.b, width});
  test::fill_normal(qkv, 7);
  test::fill_normal(dout, 8);
  fill_padding(mask, c);
  const Tensor padding = c.padding ? mask.tensor() : Tensor();
  const RandomStream stream(21, 22);
  auto loss = [&] {
    ops::attention_forward(qkv, padding, params_of(c), stream, out, probs);
    return test::dot(out, dout);
  };
  loss();
  for (int64_t i = 0; i < dqkv.numel(); ++i) dqkv.at<double>(i) = 3.0;  // must be overwritten
  ops::attention_backward(dout, qkv, probs, params_of(c), stream, dqkv);
  test::expect_gradient_matches(loss, qkv, test::values_of(dqkv), "dqkv");
}

TEST(OpsAttention, BackwardCausalPaddingGqa) { expect_backward_matches_finite_differences({5, 2, 4, 2, 3, true, 0.0, true}); }
TEST(OpsAttention, BackwardCausalPaddingGqaDropout) {
  expect_backward_matches_finite_differences({5, 2, 4, 2, 3, true, 0.3, true});
}
TEST(OpsAttention, BackwardFullMha) { expect_backward_matches_finite_differences({4, 2, 2, 2, 4, false, 0.0, false}); }
TEST(OpsAttention, BackwardMqaDropout) { expect_backward_matches_finite_differences({6, 1, 3, 1, 2, true, 0.2, false}); }

// Tensor parallelism: each half of the query groups (with its heads), run with dropout_heads /
// dropout_first_head, draws the unsplit attention's dropout masks, so its out and dqkv equal that
// half of the whole attention's; a head range outside dropout_heads is an error.
TEST(OpsAttention, HeadSliceDrawsTheUnsplitDropoutMasks) {
  const Config c{5, 2, 4, 2, 3, true, 0.3, true};
  const int64_t width = (c.na + 2 * c.ng) * c.hn, parts = 2;
  const int64_t part_width = width / parts, part_heads = c.na / parts, part_out = part_heads * c.hn;
  OwnedTensor qkv(DType::f64, {c.s, c.b, width}), mask(DType::u8, {c.b, c.s});
  OwnedTensor out(DType::f64, {c.s, c.b, c.na * c.hn}), probs(DType::f64, {c.b, c.na, c.s, c.s});
  OwnedTensor dout(DType::f64, {c.s, c.b, c.na * c.hn}), dqkv(DType::f64, {c.s, c.b, width});
  test::fill_normal(qkv, 11);
  test::fill_normal(dout, 12);
  fill_padding(mask, c);
  const RandomStream stream(31, 32);
  ops::attention_forward(qkv, mask, params_of(c), stream, out, probs);
  ops::attention_backward(dout, qkv, probs, params_of(c), stream, dqkv);
  for (int64_t r = 0; r < parts; ++r) {
    OwnedTensor qkv_r(DType::f64, {c.s, c.b, part_width}), dout_r(DType::f64, {c.s, c.b, part_out});
    OwnedTensor out_r(DType::f64, {c.s, c.b, part_out}), probs_r(DType::f64, {c.b, part_heads, c.s, c.s});
    OwnedTensor dqkv_r(DType::f64, {c.s, c.b, part_width});
    for (int64_t row = 0; row < c.s * c.b; ++row) {
      for (int64_t k = 0; k < part_width; ++k) qkv_r.at<double>(row * part_width + k) = qkv.at<double>(row * width + r * part_width + k);
      for (int64_t k = 0; k < part_out; ++k)
        dout_r.at<double>(row * part_out + k) = dout.at<double>(row * c.na * c.hn + r * part_out + k);
    }
    ops::AttentionParams p = params_of({c.s, c.b, part_heads, c.ng / parts, c.hn, c.causal, c.dropout, c.padding});
    p.dropout_heads = c.na;
    p.dropout_first_head = r * part_heads;
    ops::attention_forward(qkv_r, mask, p, stream, out_r, probs_r);
    ops::attention_backward(dout_r, qkv_r, probs_r, p, stream, dqkv_r);
    for (int64_t row = 0; row < c.s * c.b; ++row) {
      for (int64_t k = 0; k < part_out; ++k)
        EXPECT_NEAR(out_r.at<double>(row * part_out + k), out.at<double>(row * c.na * c.hn + r * part_out + k), 1e-12)
            << "part " << r << " out row " << row << " column " << k;
      for (int64_t k = 0; k < part_width; ++k)
        EXPECT_NEAR(dqkv_r.at<double>(row * part_width + k), dqkv.at<double>(row * width + r * part_width + k), 1e-12)
            << "part " << r << " dqkv row " << row << " column " << k;
    }
    p.dropout_first_head = c.na - 1;
    test::expect_error_containing([&] { ops::attention_forward(qkv_r, mask, p, stream, out_r, probs_r); },
                                  {"dropout heads [3, 5)", "4 heads"});
  }
}

TEST(OpsAttention, ArgumentErrors) {
  const Config c{4, 2, 4, 2, 3, true, 0.0, false};
  OwnedTensor qkv(DType::f32, {4, 2, 24}), out(DType::f32, {4, 2, 12}), probs(DType::f32, {2, 4, 4, 4});
  ops::AttentionParams p = params_of(c);
  p.num_query_groups = 3;
  test::expect_error_containing([&] { ops::attention_forward(qkv, Tensor(), p, RandomStream(1, 1), out, probs); },
                                {"multiple of num_query_groups"});
  p = params_of(c);
  p.head_dim = 4;
  test::expect_error_containing([&] { ops::attention_forward(qkv, Tensor(), p, RandomStream(1, 1), out, probs); },
                                {"qkv must be", "[s, b, 32]"});
  OwnedTensor wrong_mask(DType::u8, {4, 2});
  test::expect_error_containing(
      [&] { ops::attention_forward(qkv, wrong_mask, params_of(c), RandomStream(1, 1), out, probs); },
      {"key_padding_mask", "u8[2, 4]"});
  OwnedTensor wrong_probs(DType::f32, {2, 4, 4, 3});
  test::expect_error_containing(
      [&] { ops::attention_forward(qkv, Tensor(), params_of(c), RandomStream(1, 1), out, wrong_probs); },
      {"probs", "f32[2, 4, 4, 4]"});
}

}  // namespace
}  // namespace tessera
