// Dropout from the counter-based RNG: keep rule and scaling, determinism, index offsets (a slice with
// its offset equals the slice of the whole), kept fraction, and backward against finite differences.
#include "tessera/ops/dropout.h"

#include "op_test_util.h"

namespace tessera {
namespace {

using test::OwnedTensor;

TEST(OpsDropout, KeepsByStreamUniformAndScales) {
  const int64_t n = 4000;
  const double p = 0.3;
  RandomStream stream(7, 99);
  OwnedTensor in(DType::f32, {n}), out(DType::f32, {n});
  test::fill_normal(in, 1);
  ops::dropout_forward(in, p, stream, 0, out);
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    const bool keep = stream.uniform_of_quarter(static_cast<uint64_t>(i)) >= p;
    kept += keep;
    EXPECT_FLOAT_EQ(out.at<float>(i), keep ? in.at<float>(i) / float(1 - p) : 0.0f) << i;
  }
  EXPECT_NEAR(double(kept) / n, 1 - p, 0.03);
}

TEST(OpsDropout, IndexOffsetSelectsTheSameMaskAsTheWholeTensor) {
  const int64_t n = 64;
  RandomStream stream(3, 4);
  OwnedTensor in(DType::f64, {n}), whole(DType::f64, {n});
  test::fill_normal(in, 2);
  ops::dropout_forward(in, 0.5, stream, 0, whole);
  OwnedTensor tail_out(DType::f64, {n - 40});
  ops::dropout_forward(in.tensor().rows(40, n), 0.5, stream, 40, tail_out);
  for (int64_t i = 0; i < n - 40; ++i) EXPECT_EQ(tail_out.at<double>(i), whole.at<double>(40 + i));
  // A different stream draws a different mask.
  OwnedTensor other(DType::f64, {n});
  ops::dropout_forward(in, 0.5, RandomStream(3, 5), 0, other);
  int differ = 0;
  for (int64_t i = 0; i < n; ++i) differ += (other.at<double>(i) == 0) != (whole.at<double>(i) == 0);
  EXPECT_GT(differ, 0);
}

TEST(OpsDropout, ZeroProbabilityIsIdentityAndOneIsRejected) {
  OwnedTensor in(DType::f32, {5}), out(DType::f32, {5});
  test::fill_normal(in, 3);
  ops::dropout_forward(in, 0.0, RandomStream(1, 1), 0, out);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(out.at<float>(i), in.at<float>(i));
  test::expect_error_containing([&] { ops::dropout_forward(in, 1.0, RandomStream(1, 1), 0, out); }, {"[0, 1)"});
}

TEST(OpsDropout, BackwardMatchesFiniteDifferences) {
  const int64_t n = 30;
  const double p = 0.4;
  RandomStream stream(11, 12);
  OwnedTensor in(DType::f64, {n}), out(DType::f64, {n}), dout(DType::f64, {n}), din(DType::f64, {n});
  test::fill_normal(in, 4);
  test::fill_normal(dout, 5);
  ops::dropout_backward(dout, p, stream, 17, din);
  auto loss = [&] {
    ops::dropout_forward(in, p, stream, 17, out);
    return test::dot(out, dout);
  };
  test::expect_gradient_matches(loss, in, test::values_of(din), "din");
  int zeros = 0;
  for (int64_t i = 0; i < n; ++i) zeros += din.at<double>(i) == 0.0;
  EXPECT_GT(zeros, 0);
  EXPECT_LT(zeros, n);
}

}  // namespace
}  // namespace tessera
