// The float exp polynomial used by the CPU cross entropy: within a few ulp of std::exp over the
// softmax range, exactly 0 far below it, and identical lane-wise and scalar.
#include "tessera/ops/cpu/exp_polynomial.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace tessera {
namespace {

TEST(OpsExpPolynomial, CloseToStdExp) {
  double worst = 0;
  for (int i = 0; i <= 200000; ++i) {
    const float x = -87.0f + 97.0f * float(i) / 200000.0f;  // [-87, 10]
    const double expected = std::exp(double(x));
    const double relative = std::abs(ops::cpu::expf_polynomial(x) - expected) / expected;
    worst = std::max(worst, relative);
  }
  EXPECT_LT(worst, 3e-7);  // a few float ulp
  EXPECT_EQ(ops::cpu::expf_polynomial(0.0f), 1.0f);
  EXPECT_EQ(ops::cpu::expf_polynomial(-100.0f), 0.0f);
  EXPECT_EQ(ops::cpu::expf_polynomial(-std::numeric_limits<float>::infinity()), 0.0f);
}

TEST(OpsExpPolynomial, ShiftedSumMatchesScalarLoop) {
  std::vector<float> in(37), out(37);
  for (int i = 0; i < 37; ++i) in[i] = 0.37f * float(i) - 5.0f;
  const double sum = ops::cpu::exp_shifted_and_sum<float>(in.data(), 37, 2.0f, out.data());
  double expected = 0;
  for (int i = 0; i < 37; ++i) {
    EXPECT_EQ(out[i], ops::cpu::expf_polynomial(in[i] - 2.0f)) << i;  // vector lanes == scalar tail
    expected += std::exp(double(in[i]) - 2.0);
  }
  EXPECT_NEAR(sum, expected, 1e-6 * expected);
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

TEST(OpsExpPolynomial, MaxOfFindsTheLargestInAnyLane) {
  for (int n = 1; n <= 11; ++n)
    for (int at = 0; at < n; ++at) {
      std::vector<float> values(n, -3.0f);
      values[at] = 2.5f;
      EXPECT_EQ(ops::cpu::max_of<float>(values.data(), n), 2.5f) << n << " " << at;
    }
}

}  // namespace
}  // namespace tessera
