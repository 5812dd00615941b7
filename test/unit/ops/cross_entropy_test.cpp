// Cross entropy over the valid vocabulary: forward against the direct formula, padded columns
// ignored and given zero gradient, stability with large logits, backward against finite
// differences, and the out-of-range target error.
#include "tessera/ops/cross_entropy.h"

#include "op_test_util.h"

namespace tessera {
namespace {

using test::OwnedTensor;

TEST(OpsCrossEntropy, ForwardMatchesFormulaAndIgnoresPaddedColumns) {
  const int64_t n = 4, vocab = 7, valid = 5;
  OwnedTensor logits(DType::f64, {n, vocab}), targets(DType::i32, {n});
  OwnedTensor losses(DType::f64, {n}), lse(DType::f64, {n});
  test::fill_normal(logits, 1, 2.0);
  for (int64_t i = 0; i < n; ++i) {
    targets.at<int32_t>(i) = static_cast<int32_t>((3 * i + 1) % valid);
    for (int64_t j = valid; j < vocab; ++j) logits.at<double>(i * vocab + j) = 1e3;  // would dominate if used
  }
  ops::cross_entropy_forward(logits, targets, valid, losses, lse);
  for (int64_t i = 0; i < n; ++i) {
    double total = 0;
    for (int64_t j = 0; j < valid; ++j) total += std::exp(logits.at<double>(i * vocab + j));
    EXPECT_NEAR(lse.at<double>(i), std::log(total), 1e-12);
    EXPECT_NEAR(losses.at<double>(i), std::log(total) - logits.at<double>(i * vocab + targets.at<int32_t>(i)), 1e-12);
  }
}

TEST(OpsCrossEntropy, LargeLogitsStayFinite) {
  OwnedTensor logits(DType::f32, {1, 3}), targets(DType::i32, {1}), losses(DType::f32, {1}), lse(DType::f32, {1});
  logits.at<float>(0) = 1000.0f, logits.at<float>(1) = 1001.0f, logits.at<float>(2) = 990.0f;
  targets.at<int32_t>(0) = 0;
  ops::cross_entropy_forward(logits, targets, 3, losses, lse);
  const double expected_lse = 1001.0 + std::log(std::exp(-1.0) + 1.0 + std::exp(-11.0));
  EXPECT_NEAR(lse.at<float>(0), expected_lse, 1e-3);
  EXPECT_NEAR(losses.at<float>(0), expected_lse - 1000.0, 1e-3);
}

TEST(OpsCrossEntropy, BackwardMatchesFiniteDifferencesWithPadding) {
  const int64_t s = 3, b = 2, vocab = 6, valid = 4;
  OwnedTensor logits(DType::f64, {s, b, vocab}), targets(DType::i32, {s, b});
  OwnedTensor losses(DType::f64, {s, b}), lse(DType::f64, {s, b}), dlosses(DType::f64, {s, b});
  OwnedTensor dlogits(DType::f64, {s, b, vocab});
  test::fill_normal(logits, 3);
  test::fill_normal(dlosses, 4);
  for (int64_t i = 0; i < s * b; ++i) targets.at<int32_t>(i) = static_cast<int32_t>(i % valid);
  auto loss = [&] {
    ops::cross_entropy_forward(logits, targets, valid, losses, lse);
    return test::dot(losses, dlosses);
  };
  loss();
  for (int64_t i = 0; i < dlogits.numel(); ++i) dlogits.at<double>(i) = 42.0;  // overwritten, padding too
  ops::cross_entropy_backward(logits, targets, lse, dlosses, valid, dlogits);
  for (int64_t i = 0; i < s * b; ++i)
    for (int64_t j = valid; j < vocab; ++j) EXPECT_EQ(dlogits.at<double>(i * vocab + j), 0.0);
  test::expect_gradient_matches(loss, logits, test::values_of(dlogits), "dlogits");
}

TEST(OpsCrossEntropy, ForwardBackwardInOnePassEqualsBothInPlace) {
  const int64_t n = 5, vocab = 9, valid = 7;
  OwnedTensor logits(DType::f64, {n, vocab}), targets(DType::i32, {n}), dlosses(DType::f64, {n});
  OwnedTensor losses(DType::f64, {n}), lse(DType::f64, {n}), dlogits(DType::f64, {n, vocab});
  OwnedTensor fused_losses(DType::f64, {n}), fused_lse(DType::f64, {n});
  test::fill_normal(logits, 5, 2.0);
  test::fill_normal(dlosses, 6);
  for (int64_t i = 0; i < n; ++i) targets.at<int32_t>(i) = static_cast<int32_t>((2 * i + 3) % valid);
  ops::cross_entropy_forward(logits, targets, valid, losses, lse);
  ops::cross_entropy_backward(logits, targets, lse, dlosses, valid, dlogits);
  // In place, as GPTModel::chunk_loss calls it: the gradient overwrites the logits.
  ops::cross_entropy_forward_backward(logits, targets, dlosses, valid, fused_losses, fused_lse, logits);
  EXPECT_EQ(test::values_of(fused_losses), test::values_of(losses));
  EXPECT_EQ(test::values_of(fused_lse), test::values_of(lse));
  EXPECT_EQ(test::values_of(logits), test::values_of(dlogits));
}

TEST(OpsCrossEntropy, TargetsOutsideTheValidVocabularyAreNamed) {
  OwnedTensor logits(DType::f32, {2, 8}), targets(DType::i32, {2}), losses(DType::f32, {2}), lse(DType::f32, {2});
  targets.at<int32_t>(0) = 1;
  targets.at<int32_t>(1) = 6;  // a padded column
  test::expect_error_containing([&] { ops::cross_entropy_forward(logits, targets, 5, losses, lse); },
                                {"target 6 at position 1", "[0, 5)"});
  test::expect_error_containing([&] { ops::cross_entropy_forward(logits, targets, 9, losses, lse); },
                                {"valid_vocab must be in [1, 8]"});
}

}  // namespace
}  // namespace tessera
