// RMSNorm dispatch: checks devices, dtypes and shapes, then runs the CPU reference (cpu/rmsnorm.h)
// or the CUDA op (cuda/fused_ops_cuda.h).
#include "tessera/ops/rmsnorm.h"

#include "tessera/ops/cpu/rmsnorm.h"
#include "tessera/ops/cuda_dispatch.h"
#include "tessera/ops/half_compute.h"
#include "tessera/ops/op_checks.h"
#ifdef TESSERA_HAVE_CUDA
#include "tessera/ops/cuda/fused_ops_cuda.h"
#endif

namespace tessera::ops {

namespace detail {
int64_t check_rmsnorm_shapes(const char* op, const Tensor& in, const Tensor& weight, const Tensor& rstd) {
  require_defined(op, in, "in");
  require_defined(op, weight, "weight");
  require_defined(op, rstd, "rstd");
  TESSERA_CHECK(weight.ndim() == 1, op, ": weight must be [hidden], got ", weight.describe());
  const int64_t rows = rows_with_last_dim(op, in, weight.dim(0), "in");
  require_vector_like(op, rstd, rows, Shape(in.shape().begin(), in.shape().end() - 1), "rstd");
  return rows;
}
}  // namespace detail

void rmsnorm_forward(const Tensor& in, const Tensor& weight, double eps, const Tensor& out, const Tensor& rstd) {
  const char* op = "rmsnorm_forward";
  if (detail::is_half(in.dtype()) && in.device().is_cpu()) {  // bf16 / f16 on the CPU: f32 compute
    detail::compute_in_f32({in, weight, out, rstd}, {false, false, true, true},
                           [&](const std::vector<Tensor>& t) { rmsnorm_forward(t[0], t[1], eps, t[2], t[3]); });
    return;
  }
  if (detail::runs_on_cuda(op, {&in, &weight, &out, &rstd})) return TESSERA_CUDA_OP(rmsnorm_forward(in, weight, eps, out, rstd));
  TESSERA_CHECK(eps >= 0.0, op, ": eps must be >= 0, got ", eps);
  const int64_t rows = detail::check_rmsnorm_shapes(op, in, weight, rstd);
  detail::require_same_shape(op, in, "in", out, "out");
  detail::require_same_dtypes(op, in, "in", {{&weight, "weight"}, {&out, "out"}, {&rstd, "rstd"}});
  detail::visit_f32_or_f64(op, in, "in", [&](auto tag) {
    using T = decltype(tag);
    cpu::rmsnorm_forward<T>(in.data_as<T>(), weight.data_as<T>(), eps, rows, weight.dim(0), out.data_as<T>(),
                            rstd.data_as<T>());
  });
}

void rmsnorm_backward(const Tensor& dout, const Tensor& in, const Tensor& weight, const Tensor& rstd,
                      const Tensor& din, const Tensor& dweight) {
  const char* op = "rmsnorm_backward";
  if (detail::is_half(in.dtype()) && in.device().is_cpu()) {  // bf16 / f16 on the CPU: f32 compute
    detail::compute_in_f32({dout, in, weight, rstd, din, dweight}, {false, false, false, false, true, true},
                           [&](const std::vector<Tensor>& t) { rmsnorm_backward(t[0], t[1], t[2], t[3], t[4], t[5]); });
    return;
  }
  if (detail::runs_on_cuda(op, {&dout, &in, &weight, &rstd, &din, &dweight}))
    return TESSERA_CUDA_OP(rmsnorm_backward(dout, in, weight, rstd, din, dweight));
  const int64_t rows = detail::check_rmsnorm_shapes(op, in, weight, rstd);
  detail::require_same_shape(op, in, "in", dout, "dout");
  detail::require_same_shape(op, in, "in", din, "din");
  detail::require_same_shape(op, weight, "weight", dweight, "dweight");
  detail::require_same_dtypes(op, in, "in",
                              {{&dout, "dout"}, {&weight, "weight"}, {&rstd, "rstd"}, {&din, "din"}, {&dweight, "dweight"}});
  detail::visit_f32_or_f64(op, in, "in", [&](auto tag) {
    using T = decltype(tag);
    cpu::rmsnorm_backward<T>(dout.data_as<T>(), in.data_as<T>(), weight.data_as<T>(), rstd.data_as<T>(), rows,
                             weight.dim(0), din.data_as<T>(), dweight.data_as<T>());
  });
}

}  // namespace tessera::ops
