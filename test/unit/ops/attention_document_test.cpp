// Document masking in core attention (Megatron's reset_attention_mask, AttentionParams::document_ids):
// the unfused forward against an explicit reference whose mask is built as Megatron's
// get_ltor_masks_and_position_ids builds it (a lower-triangular mask, then mask[i+1:, :i+1] = 0 at
// every end-of-document index i), with and without key padding and dropout; backward against
// finite differences in f64; a document attended alone equals its rows of the packed sample; the
// fused (flash) CPU reference agrees with the unfused attention on out, lse and dqkv; bad ids are
// rejected naming the parameter.
#include <cmath>
#include <limits>
#include <vector>

#include "op_test_util.h"
#include "tessera/ops/attention.h"
#include "tessera/ops/flash_attention.h"

namespace tessera {
namespace {

using test::OwnedTensor;

struct Config {
  int64_t s, b, na, ng, hn;
  double dropout;
  bool padding;
};

// End-of-document positions per sample (sample b uses kEods[b % 3]); the document ids number the
// documents, the eod belonging to the one it ends (data/document_masks.h).
const std::vector<std::vector<int64_t>> kEods = {{2, 5}, {0, 1, 6}, {}};

void fill_documents(const OwnedTensor& ids, const Config& c) {
  for (int64_t bi = 0; bi < c.b; ++bi) {
    int32_t document = 0;
    const auto& eods = kEods[static_cast<size_t>(bi % 3)];
    for (int64_t j = 0; j < c.s; ++j) {
      ids.at<int32_t>(bi * c.s + j) = document;
      for (int64_t e : eods) document += e == j;
    }
  }
}

// Megatron's mask, [b, s, s] (1 = attend): torch.tril(ones), then for each eod index i of sample
// b, attention_mask[b, i+1:, :i+1] = 0; key padding (sample 1 masks key 4) on top.
std::vector<uint8_t> megatron_mask(const Config& c) {
  std::vector<uint8_t> mask(static_cast<size_t>(c.b * c.s * c.s), 0);
  for (int64_t bi = 0; bi < c.b; ++bi) {
    uint8_t* m = mask.data() + bi * c.s * c.s;
    for (int64_t i = 0; i < c.s; ++i)
      for (int64_t j = 0; j <= i; ++j) m[i * c.s + j] = 1;
    for (int64_t e : kEods[static_cast<size_t>(bi % 3)])
      for (int64_t i = e + 1; i < c.s; ++i)
        for (int64_t j = 0; j <= e; ++j) m[i * c.s + j] = 0;
    if (c.padding && bi == 1)
      for (int64_t i = 0; i < c.s; ++i) m[i * c.s + 4] = 0;
  }
  return mask;
}

void fill_padding(const OwnedTensor& padding, const Config& c) {
  for (int64_t bi = 0; bi < c.b; ++bi)
    for (int64_t j = 0; j < c.s; ++j) padding.at<uint8_t>(bi * c.s + j) = !(bi == 1 && j == 4);
}

ops::AttentionParams params_of(const Config& c, const Tensor& documents) {
  ops::AttentionParams p;
  p.num_heads = c.na;
  p.num_query_groups = c.ng;
  p.head_dim = c.hn;
  p.causal = true;
  p.dropout = c.dropout;
  p.document_ids = documents;
  return p;
}

// out [s, b, na hn] and probs [b, na, s, s] from a dense [b, s, s] mask, in double.
void masked_reference(const OwnedTensor& qkv, const std::vector<uint8_t>& mask, const Config& c,
                      const RandomStream& stream, std::vector<double>& out, std::vector<double>& probs) {
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
        std::vector<double> score(static_cast<size_t>(c.s), -std::numeric_limits<double>::infinity());
        double top = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < c.s; ++j) {
          if (!mask[static_cast<size_t>((bi * c.s + i) * c.s + j)]) continue;
          double dot = 0;
          for (int64_t d = 0; d < c.hn; ++d) dot += at(i, bi, q_col + d) * at(j, bi, k_col + d);
          score[j] = dot / std::sqrt(double(c.hn));
          top = std::max(top, score[j]);
        }
        if (top == -std::numeric_limits<double>::infinity()) continue;
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

TEST(AttentionDocuments, IdsNumberTheDocumentsAsMegatronsMaskSplitsThem) {
  // The hand-computed ids of the three samples (eods at {2, 5}, {0, 1, 6}, none).
  const Config c{8, 3, 1, 1, 1, 0.0, false};
  OwnedTensor ids(DType::i32, {c.b, c.s});
  fill_documents(ids, c);
  const std::vector<int32_t> expected = {0, 0, 0, 1, 1, 1, 2, 2, 0, 1, 2, 2, 2, 2, 2, 3, 0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t i = 0; i < ids.numel(); ++i) EXPECT_EQ(ids.at<int32_t>(i), expected[static_cast<size_t>(i)]) << i;
  // causal && same id is exactly Megatron's mask.
  const std::vector<uint8_t> mask = megatron_mask(c);
  for (int64_t bi = 0; bi < c.b; ++bi)
    for (int64_t i = 0; i < c.s; ++i)
      for (int64_t j = 0; j < c.s; ++j)
        EXPECT_EQ(mask[static_cast<size_t>((bi * c.s + i) * c.s + j)],
                  j <= i && ids.at<int32_t>(bi * c.s + i) == ids.at<int32_t>(bi * c.s + j))
            << bi << " " << i << " " << j;
}

void expect_forward_matches_reference(const Config& c) {
  const int64_t width = (c.na + 2 * c.ng) * c.hn;
  OwnedTensor qkv(DType::f64, {c.s, c.b, width}), ids(DType::i32, {c.b, c.s}), padding(DType::u8, {c.b, c.s});
  OwnedTensor out(DType::f64, {c.s, c.b, c.na * c.hn}), probs(DType::f64, {c.b, c.na, c.s, c.s});
  test::fill_normal(qkv, 41, 3.0);  // large scores: a leaked key would show
  fill_documents(ids, c);
  fill_padding(padding, c);
  const RandomStream stream(7, 8);
  ops::attention_forward(qkv, c.padding ? padding.tensor() : Tensor(), params_of(c, ids), stream, out, probs);
  std::vector<double> expected_out, expected_probs;
  masked_reference(qkv, megatron_mask(c), c, stream, expected_out, expected_probs);
  for (int64_t i = 0; i < out.numel(); ++i) EXPECT_NEAR(out.at<double>(i), expected_out[i], 1e-12) << "out " << i;
  for (int64_t i = 0; i < probs.numel(); ++i) {
    EXPECT_NEAR(probs.at<double>(i), expected_probs[i], 1e-13) << "probs " << i;
    if (expected_probs[i] == 0.0) EXPECT_EQ(probs.at<double>(i), 0.0) << "masked probs " << i;
  }
}

TEST(AttentionDocuments, ForwardMatchesMegatronsMask) {
  expect_forward_matches_reference({8, 3, 4, 2, 3, 0.0, false});  // GQA
  expect_forward_matches_reference({8, 3, 2, 2, 4, 0.0, true});   // MHA + key padding
  expect_forward_matches_reference({8, 3, 3, 1, 2, 0.3, true});   // MQA + padding + dropout
}

void expect_backward_matches_finite_differences(const Config& c) {
  const int64_t width = (c.na + 2 * c.ng) * c.hn;
  OwnedTensor qkv(DType::f64, {c.s, c.b, width}), ids(DType::i32, {c.b, c.s}), padding(DType::u8, {c.b, c.s});
  OwnedTensor out(DType::f64, {c.s, c.b, c.na * c.hn}), probs(DType::f64, {c.b, c.na, c.s, c.s});
  OwnedTensor dout(DType::f64, {c.s, c.b, c.na * c.hn}), dqkv(DType::f64, {c.s, c.b, width});
  test::fill_normal(qkv, 43);
  test::fill_normal(dout, 44);
  fill_documents(ids, c);
  fill_padding(padding, c);
  const Tensor mask = c.padding ? padding.tensor() : Tensor();
  const ops::AttentionParams p = params_of(c, ids);
  const RandomStream stream(9, 10);
  auto loss = [&] {
    ops::attention_forward(qkv, mask, p, stream, out, probs);
    return test::dot(out, dout);
  };
  loss();
  ops::attention_backward(dout, qkv, probs, p, stream, dqkv);
  test::expect_gradient_matches(loss, qkv, test::values_of(dqkv), "dqkv");
  // Sample 0's first document (tokens 0..2) is attended only by its own queries: changing dout of
  // the sample's later rows leaves the gradient of its q, k and v bitwise unchanged.
  OwnedTensor dout2(DType::f64, {c.s, c.b, c.na * c.hn}), dqkv2(DType::f64, {c.s, c.b, width});
  for (int64_t i = 0; i < dout.numel(); ++i) dout2.at<double>(i) = dout.at<double>(i);
  for (int64_t t = 3; t < c.s; ++t)
    for (int64_t k = 0; k < c.na * c.hn; ++k) dout2.at<double>((t * c.b + 0) * c.na * c.hn + k) += 1.0;
  loss();
  ops::attention_backward(dout2, qkv, probs, p, stream, dqkv2);
  for (int64_t t = 0; t < 3; ++t)
    for (int64_t k = 0; k < width; ++k)
      EXPECT_EQ(dqkv2.at<double>((t * c.b + 0) * width + k), dqkv.at<double>((t * c.b + 0) * width + k))
          << "token " << t << " column " << k;
}

TEST(AttentionDocuments, BackwardMatchesFiniteDifferences) {
  expect_backward_matches_finite_differences({8, 3, 4, 2, 3, 0.0, false});
  expect_backward_matches_finite_differences({8, 3, 2, 1, 3, 0.25, true});
}

// The rows of a document in a packed sample equal that document attended alone (its own sequence).
TEST(AttentionDocuments, ADocumentAloneEqualsItsRowsInThePackedSample) {
  const Config c{8, 1, 2, 1, 4, 0.0, false};  // sample 0: documents [0, 2], [3, 5], [6, 7]
  const int64_t width = (c.na + 2 * c.ng) * c.hn, hidden = c.na * c.hn;
  OwnedTensor qkv(DType::f64, {c.s, 1, width}), ids(DType::i32, {1, c.s});
  OwnedTensor out(DType::f64, {c.s, 1, hidden}), probs(DType::f64, {1, c.na, c.s, c.s});
  test::fill_normal(qkv, 45);
  fill_documents(ids, c);
  ops::attention_forward(qkv, Tensor(), params_of(c, ids), RandomStream(1, 1), out, probs);
  for (auto [begin, end] : std::vector<std::pair<int64_t, int64_t>>{{0, 3}, {3, 6}, {6, 8}}) {
    const int64_t n = end - begin;
    OwnedTensor part(DType::f64, {n, 1, width}), part_out(DType::f64, {n, 1, hidden}),
        part_probs(DType::f64, {1, c.na, n, n});
    for (int64_t i = 0; i < n * width; ++i) part.at<double>(i) = qkv.at<double>(begin * width + i);
    ops::attention_forward(part, Tensor(), params_of({n, 1, c.na, c.ng, c.hn, 0.0, false}, Tensor()),
                           RandomStream(1, 1), part_out, part_probs);
    for (int64_t i = 0; i < n * hidden; ++i)
      EXPECT_NEAR(out.at<double>(begin * hidden + i), part_out.at<double>(i), 1e-14) << begin << " " << i;
  }
}

// The fused attention's CPU reference re-masks by document in its backward: out, lse and dqkv equal
// the unfused attention's, and lse is the log-sum-exp over the row's own document.
TEST(AttentionDocuments, FlashReferenceAgreesWithUnfused) {
  for (bool padding : {false, true}) {
    const Config c{8, 3, 4, 2, 4, 0.0, padding};
    const int64_t width = (c.na + 2 * c.ng) * c.hn, hidden = c.na * c.hn;
    OwnedTensor qkv(DType::f64, {c.s, c.b, width}), ids(DType::i32, {c.b, c.s}), pad(DType::u8, {c.b, c.s});
    OwnedTensor out(DType::f64, {c.s, c.b, hidden}), probs(DType::f64, {c.b, c.na, c.s, c.s});
    OwnedTensor flash_out(DType::f64, {c.s, c.b, hidden}), lse(DType::f32, {c.b, c.na, c.s});
    OwnedTensor dout(DType::f64, {c.s, c.b, hidden}), dqkv(DType::f64, {c.s, c.b, width}),
        flash_dqkv(DType::f64, {c.s, c.b, width});
    test::fill_normal(qkv, 46, 2.0);
    test::fill_normal(dout, 47);
    fill_documents(ids, c);
    fill_padding(pad, c);
    const Tensor mask = padding ? pad.tensor() : Tensor();
    const ops::AttentionParams p = params_of(c, ids);
    ops::attention_forward(qkv, mask, p, RandomStream(1, 1), out, probs);
    ops::attention_backward(dout, qkv, probs, p, RandomStream(1, 1), dqkv);
    ops::flash_attention_forward(qkv, mask, p, flash_out, lse);
    ops::flash_attention_backward(dout, qkv, flash_out, lse, mask, p, flash_dqkv);
    for (int64_t i = 0; i < out.numel(); ++i) EXPECT_NEAR(flash_out.at<double>(i), out.at<double>(i), 1e-12) << i;
    for (int64_t i = 0; i < dqkv.numel(); ++i)
      EXPECT_NEAR(flash_dqkv.at<double>(i), dqkv.at<double>(i), 2e-5) << i;  // lse is f32
    // Sample 0, query 3 (first token of its second document) sees key 3 only: lse = its own score.
    const int64_t hpg = c.na / c.ng;
    for (int64_t h = 0; h < c.na; ++h) {
      const int64_t q_col = (h / hpg) * (hpg + 2) * c.hn + (h % hpg) * c.hn, k_col = (h / hpg) * (hpg + 2) * c.hn + hpg * c.hn;
      double dot = 0;
      for (int64_t d = 0; d < c.hn; ++d) dot += qkv.at<double>((3 * c.b) * width + q_col + d) * qkv.at<double>((3 * c.b) * width + k_col + d);
      EXPECT_NEAR(lse.at<float>(h * c.s + 3), dot / std::sqrt(double(c.hn)), 1e-5) << "head " << h;
    }
    // Without the ids the backward's re-masking differs: the check above is not vacuous.
    ops::AttentionParams no_ids = p;
    no_ids.document_ids = Tensor();
    ops::flash_attention_backward(dout, qkv, flash_out, lse, mask, no_ids, flash_dqkv);
    double largest = 0;
    for (int64_t i = 0; i < dqkv.numel(); ++i)
      largest = std::max(largest, std::fabs(flash_dqkv.at<double>(i) - dqkv.at<double>(i)));
    EXPECT_GT(largest, 1e-3);
  }
}

TEST(AttentionDocuments, BadIdsAreRejectedNamingThem) {
  const Config c{4, 2, 2, 1, 2, 0.0, false};
  const int64_t width = (c.na + 2 * c.ng) * c.hn;
  OwnedTensor qkv(DType::f32, {c.s, c.b, width}), out(DType::f32, {c.s, c.b, c.na * c.hn}),
      probs(DType::f32, {c.b, c.na, c.s, c.s}), lse(DType::f32, {c.b, c.na, c.s});
  OwnedTensor wrong_shape(DType::i32, {c.s, c.b}), wrong_dtype(DType::u8, {c.b, c.s});
  test::expect_error_containing(
      [&] { ops::attention_forward(qkv, Tensor(), params_of(c, wrong_shape), RandomStream(1, 1), out, probs); },
      {"document_ids", "i32[2, 4]"});
  test::expect_error_containing(
      [&] { ops::flash_attention_forward(qkv, Tensor(), params_of(c, wrong_dtype), out, lse); },
      {"document_ids", "i32"});
}

}  // namespace
}  // namespace tessera
