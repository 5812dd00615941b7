// Cross entropy dispatch: checks devices, dtypes, shapes and valid_vocab, then runs the CPU reference
// (cpu/cross_entropy.h). logits [..., V] are treated as [n, V].
#include "tessera/ops/cross_entropy.h"

#include "tessera/ops/cpu/cross_entropy.h"
#include "tessera/ops/half_compute.h"
#include "tessera/ops/cuda_dispatch.h"
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
  if (detail::is_half(logits.dtype()) && logits.device().is_cpu()) {  // bf16 / f16 on the CPU: f32 compute
    detail::compute_in_f32({logits, targets, losses, log_sum_exp}, {false, false, true, true}, [&](const std::vector<Tensor>& t) { cross_entropy_forward(t[0], t[1], valid_vocab, t[2], t[3]); });
    return;
  }
  if (detail::runs_on_cuda(op, {&logits, &targets, &losses, &log_sum_exp})) return TESSERA_CUDA_OP(cross_entropy_forward(logits, targets, valid_vocab, losses, log_sum_exp));
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
  if (detail::is_half(logits.dtype()) && logits.device().is_cpu()) {  // bf16 / f16 on the CPU: f32 compute
    detail::compute_in_f32({logits, targets, log_sum_exp, dlosses, dlogits}, {false, false, false, false, true}, [&](const std::vector<Tensor>& t) { cross_entropy_backward(t[0], t[1], t[2], t[3], valid_vocab, t[4]); });
    return;
  }
  if (detail::runs_on_cuda(op, {&logits, &targets, &log_sum_exp, &dlosses, &dlogits})) return TESSERA_CUDA_OP(cross_entropy_backward(logits, targets, log_sum_exp, dlosses, valid_vocab, dlogits));
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

void cross_entropy_forward_backward(const Tensor& logits, const Tensor& targets, const Tensor& dlosses,
                                    int64_t valid_vocab, const Tensor& losses, const Tensor& log_sum_exp,
                                    const Tensor& dlogits) {
  const char* op = "cross_entropy_forward_backward";
  if (detail::runs_on_cuda(op, {&logits, &targets, &dlosses, &losses, &log_sum_exp, &dlogits}))
    return TESSERA_CUDA_OP(cross_entropy_forward_backward(logits, targets, dlosses, valid_vocab, losses, log_sum_exp, dlogits));
  cross_entropy_forward(logits, targets, valid_vocab, losses, log_sum_exp);
  cross_entropy_backward(logits, targets, log_sum_exp, dlosses, valid_vocab, dlogits);
}

}  // namespace tessera::ops
