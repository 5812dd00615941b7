// The greedy row reduction's CPU reference: the first maximum among the valid columns and its
// log-softmax over them (padding columns beyond `valid` ignored).
#include <gtest/gtest.h>

#include <cmath>

#include "tessera/core/error.h"
#include "tessera/ops/argmax.h"

namespace tessera {
namespace {

TEST(ArgmaxLogSoftmax, FirstMaximumAmongValidColumns) {
  // row 0: log([.1 .2 .3 .4]) then a padding column of 100; row 1: a tie between columns 1 and 2.
  std::vector<float> logits = {std::log(.1f), std::log(.2f), std::log(.3f), std::log(.4f), 100.f,
                               0.f,           2.f,           2.f,           1.f,           100.f};
  std::vector<int32_t> index(2);
  std::vector<float> logprob(2);
  ops::argmax_log_softmax(Tensor(logits.data(), DType::f32, {2, 5}), 4, Tensor(index.data(), DType::i32, {2}),
                          Tensor(logprob.data(), DType::f32, {2}));
  EXPECT_EQ(index[0], 3);
  EXPECT_NEAR(logprob[0], std::log(0.4), 1e-6);
  EXPECT_EQ(index[1], 1);
  EXPECT_NEAR(logprob[1], 2.0 - std::log(1.0 + 2 * std::exp(2.0) + std::exp(1.0)), 1e-6);
  EXPECT_THROW(ops::argmax_log_softmax(Tensor(logits.data(), DType::f32, {2, 5}), 6,
                                       Tensor(index.data(), DType::i32, {2}), Tensor(logprob.data(), DType::f32, {2})),
               Error);
}

}  // namespace
}  // namespace tessera
