// Embedding: gather, scatter-add gradient (repeated ids accumulate), finite differences and the
// out-of-range id error that names the id.
#include "tessera/ops/embedding.h"

#include "op_test_util.h"

namespace tessera {
namespace {

using test::OwnedTensor;

TEST(OpsEmbedding, ForwardGathersRows) {
  const int64_t vocab = 5, hidden = 3;
  OwnedTensor table(DType::f32, {vocab, hidden}), ids(DType::i32, {2, 2}), out(DType::f32, {2, 2, hidden});
  for (int64_t i = 0; i < table.numel(); ++i) table.at<float>(i) = float(i);
  const int32_t id_values[] = {4, 0, 2, 4};
  for (int i = 0; i < 4; ++i) ids.at<int32_t>(i) = id_values[i];
  ops::embedding_forward(ids, table, out);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < hidden; ++j) EXPECT_EQ(out.at<float>(i * hidden + j), float(id_values[i] * hidden + j));
}

TEST(OpsEmbedding, BackwardScatterAddsAndMatchesFiniteDifferences) {
  const int64_t vocab = 6, hidden = 4, n = 5;
  OwnedTensor table(DType::f64, {vocab, hidden}), ids(DType::i32, {n}), out(DType::f64, {n, hidden});
  OwnedTensor dout(DType::f64, {n, hidden}), dtable(DType::f64, {vocab, hidden});
  test::fill_normal(table, 1);
  test::fill_normal(dout, 2);
  const int32_t id_values[] = {3, 1, 3, 5, 3};
  for (int i = 0; i < n; ++i) ids.at<int32_t>(i) = id_values[i];
  for (int64_t i = 0; i < dtable.numel(); ++i) dtable.at<double>(i) = 1.0;  // accumulated into
  ops::embedding_backward(ids, dout, dtable);
  auto analytic = test::values_of(dtable);
  for (auto& v : analytic) v -= 1.0;
  for (int j = 0; j < hidden; ++j) {
    EXPECT_NEAR(analytic[3 * hidden + j],
                dout.at<double>(0 * hidden + j) + dout.at<double>(2 * hidden + j) + dout.at<double>(4 * hidden + j),
                1e-14);
    EXPECT_EQ(analytic[0 * hidden + j], 0.0);  // id 0 never appears
  }
  auto loss = [&] {
    ops::embedding_forward(ids, table, out);
    return test::dot(out, dout);
  };
  test::expect_gradient_matches(loss, table, analytic, "dtable");
}

TEST(OpsEmbedding, OutOfRangeIdIsNamed) {
  OwnedTensor table(DType::f32, {10, 2}), ids(DType::i32, {3}), out(DType::f32, {3, 2});
  ids.at<int32_t>(0) = 1;
  ids.at<int32_t>(1) = 9;
  ids.at<int32_t>(2) = 10;
  test::expect_error_containing([&] { ops::embedding_forward(ids, table, out); },
                                {"token id 10 at position 2", "[0, 10)"});
  ids.at<int32_t>(2) = -3;
  test::expect_error_containing([&] { ops::embedding_backward(ids, out, table); }, {"token id -3 at position 2"});
  OwnedTensor ids64(DType::i64, {3});
  test::expect_error_containing([&] { ops::embedding_forward(ids64, table, out); }, {"ids must be i32"});
}

}  // namespace
}  // namespace tessera
