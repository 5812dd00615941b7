// Fused bias + dropout + residual add dispatch: checks shapes, dtypes and p, then runs the CPU
// reference (cpu/bias_dropout_add.h) or the CUDA op (cuda/fused_ops_cuda.h).
#include "tessera/ops/bias_dropout_add.h"

#include "tessera/ops/cpu/bias_dropout_add.h"
#include "tessera/ops/cpu/dropout.h"
#include "tessera/ops/cuda_dispatch.h"
#include "tessera/ops/half_compute.h"
#include "tessera/ops/op_checks.h"
#ifdef TESSERA_HAVE_CUDA
#include "tessera/ops/cuda/fused_ops_cuda.h"
#endif

namespace tessera::ops {

namespace {
bool present(const Tensor& t) { return t.defined() && t.data() != nullptr; }

void check_p(const char* op, double p) {
  TESSERA_CHECK(p >= 0.0 && p < 1.0, op, ": dropout probability must be in [0, 1), got ", p);
}
}  // namespace

namespace detail {
int64_t check_bias_dropout_add_forward(const char* op, const Tensor& x, const Tensor& bias, const Tensor& residual,
                                       double p, const Tensor& out) {
  check_p(op, p);
  require_defined(op, x, "x");
  require_defined(op, residual, "residual");
  require_defined(op, out, "out");
  TESSERA_CHECK(x.ndim() >= 1, op, ": x must be [..., cols], got ", x.describe());
  const int64_t cols = x.dim(-1);
  if (present(bias) && bias.shape() != Shape{cols})
    TESSERA_FAIL(op, ": bias must be [", cols, "] (the last dim of x) or undefined, got ", bias.describe());
  require_same_shape(op, x, "x", residual, "residual");
  require_same_shape(op, x, "x", out, "out");
  return cols;
}

int64_t check_bias_dropout_add_backward(const char* op, const Tensor& dout, double p, const Tensor& dx,
                                        const Tensor& dbias) {
  check_p(op, p);
  require_defined(op, dout, "dout");
  require_defined(op, dx, "dx");
  TESSERA_CHECK(dout.ndim() >= 1, op, ": dout must be [..., cols], got ", dout.describe());
  const int64_t cols = dout.dim(-1);
  require_same_shape(op, dout, "dout", dx, "dx");
  if (present(dbias) && dbias.shape() != Shape{cols})
    TESSERA_FAIL(op, ": dbias must be [", cols, "] (the last dim of dout) or undefined, got ", dbias.describe());
  return cols;
}
}  // namespace detail

void bias_dropout_add_forward(const Tensor& x, const Tensor& bias, const Tensor& residual, double p,
                              const RandomStream& stream, uint64_t index_offset, const Tensor& out) {
  const char* op = "bias_dropout_add_forward";
  if (detail::is_half(x.dtype()) && x.device().is_cpu()) {  // bf16 / f16 on the CPU: f32 compute
    detail::compute_in_f32({x, bias, residual, out}, {false, false, false, true}, [&](const std::vector<Tensor>& t) {
      bias_dropout_add_forward(t[0], t[1], t[2], p, stream, index_offset, t[3]);
    });
    return;
  }
  if (detail::runs_on_cuda(op, {&x, &bias, &residual, &out}))
    return TESSERA_CUDA_OP(bias_dropout_add_forward(x, bias, residual, p, stream, index_offset, out));
  const int64_t cols = detail::check_bias_dropout_add_forward(op, x, bias, residual, p, out);
  detail::require_same_dtypes(op, x, "x", {{&residual, "residual"}, {&out, "out"}});
  if (present(bias)) detail::require_same_dtype(op, x, "x", bias, "bias");
  detail::visit_f32_or_f64(op, x, "x", [&](auto tag) {
    using T = decltype(tag);
    cpu::bias_dropout_add_forward<T>(x.data_as<T>(), present(bias) ? bias.data_as<T>() : nullptr,
                                     residual.data_as<T>(), x.numel(), cols, p, stream, index_offset,
                                     out.data_as<T>());
  });
}

void bias_dropout_add_backward(const Tensor& dout, double p, const RandomStream& stream, uint64_t index_offset,
                               const Tensor& dx, const Tensor& dbias) {
  const char* op = "bias_dropout_add_backward";
  if (detail::is_half(dout.dtype()) && dout.device().is_cpu()) {  // bf16 / f16 on the CPU: f32 compute
    detail::compute_in_f32({dout, dx, dbias}, {false, true, true}, [&](const std::vector<Tensor>& t) {
      bias_dropout_add_backward(t[0], p, stream, index_offset, t[1], t[2]);
    });
    return;
  }
  if (detail::runs_on_cuda(op, {&dout, &dx, &dbias}))
    return TESSERA_CUDA_OP(bias_dropout_add_backward(dout, p, stream, index_offset, dx, dbias));
  const int64_t cols = detail::check_bias_dropout_add_backward(op, dout, p, dx, dbias);
  detail::require_same_dtype(op, dout, "dout", dx, "dx");
  if (present(dbias)) detail::require_same_dtype(op, dout, "dout", dbias, "dbias");
  detail::visit_f32_or_f64(op, dout, "dout", [&](auto tag) {
    using T = decltype(tag);
    cpu::dropout_apply<T>(dout.data_as<T>(), dout.numel(), p, stream, index_offset, dx.data_as<T>());
    if (present(dbias))
      cpu::column_sum_accumulate<T>(dx.data_as<T>(), cols ? dx.numel() / cols : 0, cols, dbias.data_as<T>());
  });
}

}  // namespace tessera::ops
