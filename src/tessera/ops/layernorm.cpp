// LayerNorm dispatch: checks devices, dtypes and shapes, then runs the CPU reference (cpu/layernorm.h).
#include "tessera/ops/layernorm.h"

#include <vector>

#include "tessera/ops/cpu/layernorm.h"
#include "tessera/ops/half_compute.h"
#include "tessera/ops/cuda_dispatch.h"
#include "tessera/ops/op_checks.h"

namespace tessera::ops {

namespace {
Shape leading_shape(const Tensor& t) { return Shape(t.shape().begin(), t.shape().end() - 1); }
}  // namespace

void layernorm_forward(const Tensor& in, const Tensor& weight, const Tensor& bias, double eps, const Tensor& out,
                       const Tensor& mean, const Tensor& rstd) {
  const char* op = "layernorm_forward";
  if (detail::is_half(in.dtype()) && in.device().is_cpu()) {  // bf16 / f16 on the CPU: f32 compute
    detail::compute_in_f32({in, weight, bias, out, mean, rstd}, {false, false, false, true, true, true}, [&](const std::vector<Tensor>& t) { layernorm_forward(t[0], t[1], t[2], eps, t[3], t[4], t[5]); });
    return;
  }
  if (detail::runs_on_cuda(op, {&in, &weight, &bias, &out, &mean, &rstd})) return TESSERA_CUDA_OP(layernorm_forward(in, weight, bias, eps, out, mean, rstd));
  TESSERA_CHECK(weight.ndim() == 1, op, ": weight must be [hidden], got ", weight.describe());
  TESSERA_CHECK(eps >= 0.0, op, ": eps must be >= 0, got ", eps);
  const int64_t hidden = weight.dim(0);
  const int64_t rows = detail::rows_with_last_dim(op, in, hidden, "in");
  detail::require_same_shape(op, weight, "weight", bias, "bias");
  detail::require_same_shape(op, in, "in", out, "out");
  detail::require_vector_like(op, mean, rows, leading_shape(in), "mean");
  detail::require_vector_like(op, rstd, rows, leading_shape(in), "rstd");
  detail::require_same_dtypes(op, in, "in",
                              {{&weight, "weight"}, {&bias, "bias"}, {&out, "out"}, {&mean, "mean"}, {&rstd, "rstd"}});
  detail::visit_f32_or_f64(op, in, "in", [&](auto tag) {
    using T = decltype(tag);
    cpu::layernorm_forward<T>(in.data_as<T>(), weight.data_as<T>(), bias.data_as<T>(), eps, rows, hidden,
                              out.data_as<T>(), mean.data_as<T>(), rstd.data_as<T>());
  });
}

void layernorm_backward(const Tensor& dout, const Tensor& in, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd, const Tensor& din, const Tensor& dweight, const Tensor& dbias,
                        const Tensor& residual_grad) {
  const char* op = "layernorm_backward";
  const bool residual = residual_grad.defined();
  if (detail::is_half(in.dtype()) && in.device().is_cpu()) {  // bf16 / f16 on the CPU: f32 compute
    std::vector<Tensor> tensors{dout, in, weight, mean, rstd, din, dweight, dbias};
    std::vector<bool> outputs{false, false, false, false, false, true, true, true};
    if (residual) tensors.push_back(residual_grad), outputs.push_back(false);
    detail::compute_in_f32(tensors, outputs, [&](const std::vector<Tensor>& t) {
      layernorm_backward(t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], residual ? t[8] : Tensor());
    });
    return;
  }
  if (detail::runs_on_cuda(op, {&dout, &in, &weight, &mean, &rstd, &din, &dweight, &dbias}))
    return TESSERA_CUDA_OP(layernorm_backward(dout, in, weight, mean, rstd, din, dweight, dbias, residual_grad));
  TESSERA_CHECK(weight.ndim() == 1, op, ": weight must be [hidden], got ", weight.describe());
  const int64_t hidden = weight.dim(0);
  const int64_t rows = detail::rows_with_last_dim(op, in, hidden, "in");
  detail::require_same_shape(op, in, "in", dout, "dout");
  detail::require_same_shape(op, in, "in", din, "din");
  detail::require_same_shape(op, weight, "weight", dweight, "dweight");
  detail::require_same_shape(op, weight, "weight", dbias, "dbias");
  detail::require_vector_like(op, mean, rows, leading_shape(in), "mean");
  detail::require_vector_like(op, rstd, rows, leading_shape(in), "rstd");
  detail::require_same_dtypes(op, in, "in",
                              {{&dout, "dout"}, {&weight, "weight"}, {&mean, "mean"}, {&rstd, "rstd"}, {&din, "din"},
                               {&dweight, "dweight"}, {&dbias, "dbias"}});
  if (residual) {
    detail::require_same_shape(op, in, "in", residual_grad, "residual_grad");
    detail::require_same_dtypes(op, in, "in", {{&residual_grad, "residual_grad"}});
    TESSERA_CHECK(residual_grad.device() == in.device(), op, ": residual_grad is on ", residual_grad.device().name(),
                  ", in on ", in.device().name());
  }
  detail::visit_f32_or_f64(op, in, "in", [&](auto tag) {
    using T = decltype(tag);
    cpu::layernorm_backward<T>(dout.data_as<T>(), in.data_as<T>(), weight.data_as<T>(), mean.data_as<T>(),
                               rstd.data_as<T>(), rows, hidden, din.data_as<T>(), dweight.data_as<T>(),
                               dbias.data_as<T>(), residual ? residual_grad.data_as<T>() : nullptr);
  });
}

}  // namespace tessera::ops
