#include "tessera/ops/argmax.h"

#include <cmath>

#include "tessera/ops/cuda_dispatch.h"
#include "tessera/ops/op_checks.h"

namespace tessera::ops {

void argmax_log_softmax(const Tensor& logits, int64_t valid, const Tensor& index, const Tensor& logprob) {
  const char* op = "argmax_log_softmax";
  TESSERA_CHECK(logits.ndim() == 2 && valid >= 1 && valid <= logits.dim(1), op, ": logits must be [rows, cols] with 1 <= valid (",
                valid, ") <= cols, got ", logits.describe());
  expect_tensor(index, DType::i32, {logits.dim(0)}, "argmax_log_softmax: index");
  expect_tensor(logprob, DType::f32, {logits.dim(0)}, "argmax_log_softmax: logprob");
  if (detail::runs_on_cuda(op, {&logits, &index, &logprob}))
    return TESSERA_CUDA_OP(argmax_log_softmax(logits, valid, index, logprob));
  detail::visit_f32_or_f64(op, logits, "logits", [&](auto tag) {
    using T = decltype(tag);
    const int64_t cols = logits.dim(1);
    for (int64_t r = 0; r < logits.dim(0); ++r) {
      const T* row = logits.data_as<T>() + r * cols;
      int64_t best = 0;
      for (int64_t c = 1; c < valid; ++c)
        if (row[c] > row[best]) best = c;
      double sum = 0;
      for (int64_t c = 0; c < valid; ++c) sum += std::exp(static_cast<double>(row[c]) - static_cast<double>(row[best]));
      index.data_as<int32_t>()[r] = static_cast<int32_t>(best);
      logprob.data_as<float>()[r] = static_cast<float>(-std::log(sum));
    }
  });
}

}  // namespace tessera::ops
