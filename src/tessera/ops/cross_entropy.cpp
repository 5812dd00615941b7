// Cross entropy dispatch: checks devices, dtypes, shapes and valid_vocab, then runs the CPU reference
// (cpu/cross_entropy.h). logits [..., V] are treated as [n, V].
#include "tessera/ops/cross_entropy.h"

#include "tessera/ops/cpu/cross_entropy.h"
#include "tessera/ops/op_checks.h"

namespace tessera::ops {

namespace {
// Checks logits [..., V], valid_vocab in [1, V] and targets i32 with n elements; returns n.
int64_t check_logits_and_targets(const char* op, const Tensor& logits, const Tensor& targets, int64_t valid_vocab) {
  TESSERA_CHECK(logits.ndim() >= 1, op, ": logits must be [n, V], got ", logits.describe());
  const int64_t vocab = logits.dim(-1);
  TESSERA_CHECK(valid_vocab >= 1 && valid_vocab <= vocab, op, ": valid_vocab must be in [1, ", vocab,
                "] (the logits' last dimension), got ", valid_vocab);
  const int64_t n = vocab ? logits.numel() / vocab : 0;
  detail::require_dtype(op, targets, DType::i32, "targets");
  const Shape leading(logits.shape().begin(), logits.shape().end() - 1);
  detail::require_vector_like(op, targets, n, leading, "targets");
  return n;
}
}  // namespace

void cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t valid_vocab, const Tensor& losses,
                           const Tensor& log_sum_exp) {
  const char* op = "cross_entropy_forward";
  detail::require_cpu(op, {&logits, &targets, &losses, &log_sum_exp});
  const int64_t n = check_logits_and_targets(op, logits, targets, valid_vocab);
  const Shape leading(logits.shape().begin(), logits.shape().end() - 1);
  detail::require_vector_like(op, losses, n, leading, "losses");
  detail::require_vector_like(op, log_sum_exp, n, leading, "log_sum_exp");
  detail::require_same_dtypes(op, logits, "logits", {{&losses, "losses"}, {&log_sum_exp, "log_sum_exp"}});
  detail::visit_f32_or_f64(op, logits, "logits", [&](auto tag) {
    using T = decltype(tag);
    cpu::cross_entropy_forward<T>(logits.data_as<T>(), targets.data_as<int32_t>(), n, logits.dim(-1), valid_vocab,
                                  losses.data_as<T>(), log_sum_exp.data_as<T>());
  });
}

void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& log_sum_exp,
                            const Tensor& dlosses, int64_t valid_vocab, const Tensor& dlogits) {
  const char* op = "cross_entropy_backward";
  detail::require_cpu(op, {&logits, &targets, &log_sum_exp, &dlosses, &dlogits});
  const int64_t n = check_logits_and_targets(op, logits, targets, valid_vocab);
  const Shape leading(logits.shape().begin(), logits.shape().end() - 1);
  detail::require_vector_like(op, log_sum_exp, n, leading, "log_sum_exp");
  detail::require_vector_like(op, dlosses, n, leading, "dlosses");
  detail::require_same_shape(op, logits, "logits", dlogits, "dlogits");
  detail::require_same_dtypes(op, logits, "logits",
                              {{&log_sum_exp, "log_sum_exp"}, {&dlosses, "dlosses"}, {&dlogits, "dlogits"}});
  detail::visit_f32_or_f64(op, logits, "logits", [&](auto tag) {
    using T = decltype(tag);
    cpu::cross_entropy_backward<T>(logits.data_as<T>(), targets.data_as<int32_t>(), log_sum_exp.data_as<T>(),
                                   dlosses.data_as<T>(), n, logits.dim(-1), valid_vocab, dlogits.data_as<T>());
  });
}

}  // namespace tessera::ops
