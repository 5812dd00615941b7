// Linear layer and matmul_nt dispatch: checks devices, dtypes and shapes, then runs the CPU reference
// (cpu/linear.h, GEMMs through CBLAS). Inputs [..., features] are treated as [rows, features].
#include "tessera/ops/linear.h"

#include "tessera/ops/activation.h"
#include "tessera/ops/cpu/linear.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/half_compute.h"
#include "tessera/ops/cuda_dispatch.h"
#include "tessera/ops/op_checks.h"

namespace tessera::ops {

namespace {
// `t` must be `like` with the last dimension replaced by `last`.
void require_rows_like(const char* op, const Tensor& like, const char* like_name, const Tensor& t, int64_t last,
                       const char* name) {
  Shape expected = like.shape();
  expected.back() = last;
  if (t.shape() != expected)
    TESSERA_FAIL(op, ": ", name, " must be ", shape_string(expected), " (the rows of ", like_name, " ",
                 shape_string(like.shape()), "), got ", t.describe());
}

template <typename T>
T* data_or_null(const Tensor& t) {
  return t.defined() && t.numel() > 0 ? t.data_as<T>() : nullptr;
}
}  // namespace

void linear_forward(const Tensor& in, const Tensor& weight, const Tensor& bias, const Tensor& out) {
  const char* op = "linear_forward";
  if (detail::is_half(in.dtype()) && in.device().is_cpu()) {  // bf16 / f16 on the CPU: f32 compute
    detail::compute_in_f32({in, weight, bias, out}, {false, false, false, true}, [&](const std::vector<Tensor>& t) { linear_forward(t[0], t[1], t[2], t[3]); });
    return;
  }
  if (detail::runs_on_cuda(op, {&in, &weight, &bias, &out})) return TESSERA_CUDA_OP(linear_forward(in, weight, bias, out));
  TESSERA_CHECK(weight.ndim() == 2, op, ": weight must be [out_features, in_features], got ", weight.describe());
  const int64_t out_features = weight.dim(0), in_features = weight.dim(1);
  const int64_t rows = detail::rows_with_last_dim(op, in, in_features, "in");
  require_rows_like(op, in, "in", out, out_features, "out");
  detail::require_same_dtypes(op, in, "in", {{&weight, "weight"}, {&out, "out"}});
  if (bias.defined()) {
    detail::require_same_dtype(op, in, "in", bias, "bias");
    if (bias.shape() != Shape{out_features})
      TESSERA_FAIL(op, ": bias must be [", out_features, "] or undefined, got ", bias.describe());
  }
  detail::visit_f32_or_f64(op, in, "in", [&](auto tag) {
    using T = decltype(tag);
    cpu::linear_forward<T>(in.data_as<T>(), weight.data_as<T>(), bias.defined() ? bias.data_as<T>() : nullptr, rows,
                           in_features, out_features, out.data_as<T>());
  });
}

void linear_residual_forward(const Tensor& in, const Tensor& weight, const Tensor& bias, const Tensor& residual,
                             const Tensor& out) {
  const char* op = "linear_residual_forward";
  detail::require_same_shape(op, out, "out", residual, "residual");
  detail::require_same_dtype(op, out, "out", residual, "residual");
  TESSERA_CHECK(residual.data() != out.data() || out.numel() == 0, op, ": residual must not be out itself");
  if (detail::is_half(in.dtype()) && in.device().is_cpu()) {  // bf16 / f16 on the CPU: f32 compute, one rounding
    detail::compute_in_f32({in, weight, bias, residual, out}, {false, false, false, false, true},
                           [&](const std::vector<Tensor>& t) {
                             linear_residual_forward(t[0], t[1], t[2], t[3], t[4]);
                           });
    return;
  }
  if (detail::runs_on_cuda(op, {&in, &weight, &bias, &residual, &out}))
    return TESSERA_CUDA_OP(linear_residual_forward(in, weight, bias, residual, out));
  linear_forward(in, weight, bias, out);
  add(out, residual, out);
}

void linear_backward(const Tensor& dout, const Tensor& in, const Tensor& weight, const Tensor& din,
                     const Tensor& dweight, const Tensor& dbias) {
  const char* op = "linear_backward";
  if (detail::is_half(in.dtype()) && in.device().is_cpu()) {  // bf16 / f16 on the CPU: f32 compute
    detail::compute_in_f32({dout, in, weight, din, dweight, dbias}, {false, false, false, true, true, true}, [&](const std::vector<Tensor>& t) { linear_backward(t[0], t[1], t[2], t[3], t[4], t[5]); });
    return;
  }
  if (detail::runs_on_cuda(op, {&dout, &in, &weight, &din, &dweight, &dbias})) return TESSERA_CUDA_OP(linear_backward(dout, in, weight, din, dweight, dbias));
  TESSERA_CHECK(weight.ndim() == 2, op, ": weight must be [out_features, in_features], got ", weight.describe());
  const int64_t out_features = weight.dim(0), in_features = weight.dim(1);
  const int64_t rows = detail::rows_with_last_dim(op, in, in_features, "in");
  require_rows_like(op, in, "in", dout, out_features, "dout");
  detail::require_same_dtypes(op, in, "in", {{&weight, "weight"}, {&dout, "dout"}});
  if (din.defined()) {
    detail::require_same_shape(op, in, "in", din, "din");
    detail::require_same_dtype(op, in, "in", din, "din");
  }
  if (dweight.defined()) {
    detail::require_same_shape(op, weight, "weight", dweight, "dweight");
    detail::require_same_dtype(op, in, "in", dweight, "dweight");
  }
  if (dbias.defined()) {
    detail::require_same_dtype(op, in, "in", dbias, "dbias");
    if (dbias.shape() != Shape{out_features})
      TESSERA_FAIL(op, ": dbias must be [", out_features, "] or undefined, got ", dbias.describe());
  }
  detail::visit_f32_or_f64(op, in, "in", [&](auto tag) {
    using T = decltype(tag);
    cpu::linear_backward<T>(dout.data_as<T>(), in.data_as<T>(), weight.data_as<T>(), rows, in_features, out_features,
                            data_or_null<T>(din), data_or_null<T>(dweight), data_or_null<T>(dbias));
  });
}

void linear_gelu_forward(const Tensor& in, const Tensor& weight, const Tensor& bias, const Tensor& pre_activation,
                         const Tensor& out) {
  const char* op = "linear_gelu_forward";
  if (detail::runs_on_cuda(op, {&in, &weight, &bias, &pre_activation, &out}))
    return TESSERA_CUDA_OP(linear_gelu_forward(in, weight, bias, pre_activation, out));
  linear_forward(in, weight, bias, pre_activation);
  gelu_forward(pre_activation, out);
}

void linear_backward_dgelu(const Tensor& dout, const Tensor& in, const Tensor& weight, const Tensor& pre_activation,
                           const Tensor& dpre, const Tensor& dweight, const Tensor& dbias) {
  const char* op = "linear_backward_dgelu";
  if (detail::runs_on_cuda(op, {&dout, &in, &weight, &pre_activation, &dpre, &dweight, &dbias}))
    return TESSERA_CUDA_OP(linear_backward_dgelu(dout, in, weight, pre_activation, dpre, dweight, dbias));
  detail::require_same_shape(op, in, "in", dpre, "dpre");
  linear_backward(dout, in, weight, dpre, dweight, dbias);
  gelu_backward(dpre, pre_activation, dpre);  // elementwise: in place is safe
}

void matmul_nt(const Tensor& a, const Tensor& b, const Tensor& out, bool accumulate) {
  const char* op = "matmul_nt";
  if (detail::is_half(a.dtype()) && a.device().is_cpu()) {  // bf16 / f16 on the CPU: f32 compute
    detail::compute_in_f32({a, b, out}, {false, false, true}, [&](const std::vector<Tensor>& t) { matmul_nt(t[0], t[1], t[2], accumulate); });
    return;
  }
  if (detail::runs_on_cuda(op, {&a, &b, &out})) return TESSERA_CUDA_OP(matmul_nt(a, b, out, accumulate));
  TESSERA_CHECK(b.ndim() == 2, op, ": b must be [n, k], got ", b.describe());
  const int64_t n = b.dim(0), k = b.dim(1);
  const int64_t m = detail::rows_with_last_dim(op, a, k, "a");
  if (out.shape() != Shape{m, n}) require_rows_like(op, a, "a", out, n, "out");
  detail::require_same_dtypes(op, a, "a", {{&b, "b"}, {&out, "out"}});
  detail::visit_f32_or_f64(op, a, "a", [&](auto tag) {
    using T = decltype(tag);
    cpu::matmul_nt<T>(a.data_as<T>(), b.data_as<T>(), m, n, k, out.data_as<T>(), accumulate);
  });
}

}  // namespace tessera::ops
