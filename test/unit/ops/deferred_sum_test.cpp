// DeferredSum: pending terms are waited for once, on value(), and the total is bit for bit the
// left-to-right double sum of the terms as they were added, pending or not; masked_sum_deferred on
// the CPU equals masked_sum.
#include "tessera/ops/deferred_sum.h"

#include <cstring>
#include <memory>

#include "op_test_util.h"
#include "tessera/ops/elementwise.h"

namespace tessera {
namespace {

// A device term stand-in: counts how often it is waited for.
class CountingTerm final : public ops::PendingDouble {
 public:
  explicit CountingTerm(double v) : value_(v) {}
  double wait() const override {
    ++waits;
    return value_;
  }
  mutable int waits = 0;

 private:
  double value_;
};

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

TEST(DeferredSum, AddsInOrderAndWaitsOnce) {
  // Terms whose sum depends on the order of addition in double.
  const double terms[] = {1e16, 1.0, -1e16, 1.0, 0.1, 3.0};
  double eager = 0;
  for (double t : terms) eager += t;
  std::vector<std::shared_ptr<CountingTerm>> pending;
  ops::DeferredSum sum;
  for (int i = 0; i < 6; ++i) {
    if (i % 2 == 1) {  // every other term still "on the device"
      pending.push_back(std::make_shared<CountingTerm>(terms[i]));
      sum += ops::DeferredSum(pending.back());
    } else {
      sum += terms[i];
    }
  }
  EXPECT_TRUE(sum.has_pending_terms());
  for (const auto& p : pending) EXPECT_EQ(p->waits, 0) << "adding must not wait";
  EXPECT_TRUE(same_bits(sum.value(), eager)) << sum.value() << " vs " << eager;
  EXPECT_TRUE(same_bits(sum.value(), eager));
  EXPECT_FALSE(sum.has_pending_terms());
  for (const auto& p : pending) EXPECT_EQ(p->waits, 1) << "value() waits for a term once";
}

TEST(DeferredSum, ASumAddedAsATermCountsAsOneDouble) {
  // total += (a + b) is not total += a; total += b in double: a pending sum must keep its grouping.
  const double a = 1.0, b = 1e16, c = -1e16;
  ops::DeferredSum inner(std::make_shared<CountingTerm>(b));
  inner += a;  // inner = b + a
  ops::DeferredSum outer = c;
  outer += inner;
  const double eager = c + (b + a);
  EXPECT_TRUE(same_bits(outer.value(), eager)) << outer.value() << " vs " << eager;
  EXPECT_FALSE(same_bits(eager, (c + b) + a)) << "the test's numbers must tell the groupings apart";
}

TEST(DeferredSum, ResolvesBeyondThePendingBound) {
  auto term = std::make_shared<CountingTerm>(0.5);
  ops::DeferredSum sum;
  for (size_t i = 0; i <= ops::DeferredSum::kMaxPendingTerms; ++i) sum += ops::DeferredSum(term);
  EXPECT_FALSE(sum.has_pending_terms()) << "one term past the bound waits for them all";
  EXPECT_EQ(term->waits, static_cast<int>(ops::DeferredSum::kMaxPendingTerms) + 1);
  EXPECT_EQ(sum.value(), 0.5 * static_cast<double>(ops::DeferredSum::kMaxPendingTerms + 1));
}

TEST(DeferredSum, RejectsANullTerm) {
  test::expect_error_containing([] { ops::DeferredSum(std::shared_ptr<const ops::PendingDouble>()); },
                                {"DeferredSum", "must not be null"});
}

TEST(DeferredSum, MaskedSumDeferredEqualsMaskedSumOnTheCpu) {
  test::OwnedTensor values(DType::f32, {7}), mask(DType::f32, {7});
  for (int i = 0; i < 7; ++i) values.at<float>(i) = 0.37f * static_cast<float>(i) - 1.0f, mask.at<float>(i) = i % 3 ? 1.0f : 0.0f;
  const ops::DeferredSum deferred = ops::masked_sum_deferred(values, mask);
  EXPECT_FALSE(deferred.has_pending_terms()) << "the CPU computes it at once";
  EXPECT_TRUE(same_bits(deferred.value(), ops::masked_sum(values, mask)));
  double want = 0;
  for (int i = 0; i < 7; ++i) want += mask.at<float>(i) != 0 ? double(values.at<float>(i)) : 0.0;
  EXPECT_DOUBLE_EQ(deferred.value(), want);
}

}  // namespace
}  // namespace tessera
