// CUDA elementwise ops behind the dispatchers: GeLU (+ fused bias), dropout, add/scale/fill/copy,
// sum of squares, AdamW and the stream synchronisation point (see ops_cuda.h).
#include <cmath>
#include <cstring>

#include "kernels/kernels.h"
#include "tessera/ops/cuda/cuda_context.h"
#include "tessera/ops/cuda/dropout_args.h"
#include "tessera/ops/cuda/cuda_op_checks.h"
#include "tessera/ops/cuda/ops_cuda.h"
#include "tessera/ops/cuda/pinned_scalar_reads.h"
#include "tessera/ops/op_checks.h"
#include "tessera/ops/swiglu.h"
#include "tessera/core/cuda_check.h"

namespace tessera::ops::cuda {

namespace {
cudaStream_t stream() { return CudaContext::get().stream(); }
}  // namespace

void gelu_forward(const Tensor& in, const Tensor& out) {
  const char* op = "gelu_forward";
  detail::require_same_shape(op, in, "in", out, "out");
  detail::require_same_dtype(op, in, "in", out, "out");
  require_storage_dtype(op, in, "in");
  kernels::gelu_forward(in.dtype(), in.data(), nullptr, in.numel(), 1, out.data(), stream());
}

void swiglu_forward(const Tensor& in, const Tensor& out) {
  const char* op = "swiglu_forward";
  const auto [n, f] = detail::check_swiglu_shapes(op, in, out, "out");
  require_storage_dtype(op, in, "in");
  kernels::swiglu_forward(in.dtype(), in.data(), n * f, out.data(), stream());
}

void swiglu_backward(const Tensor& dout, const Tensor& in, const Tensor& din) {
  const char* op = "swiglu_backward";
  const auto [n, f] = detail::check_swiglu_shapes(op, in, dout, "dout");
  detail::require_same_shape(op, in, "in", din, "din");
  detail::require_same_dtype(op, in, "in", din, "din");
  require_storage_dtype(op, in, "in");
  kernels::swiglu_backward(in.dtype(), dout.data(), in.data(), n * f, din.data(), stream());
}

void bias_gelu_forward(const Tensor& in, const Tensor& bias, const Tensor& out) {
  const char* op = "bias_gelu_forward";
  require_storage_dtype(op, in, "in");
  TESSERA_CHECK(bias.ndim() == 1, op, ": bias must be [cols], got ", bias.describe());
  detail::rows_with_last_dim(op, in, bias.dim(0), "in");
  detail::require_same_shape(op, in, "in", out, "out");
  detail::require_same_dtypes(op, in, "in", {{&bias, "bias"}, {&out, "out"}});
  kernels::gelu_forward(in.dtype(), in.data(), bias.data(), in.numel(), bias.dim(0), out.data(), stream());
}

void gelu_backward(const Tensor& dout, const Tensor& in, const Tensor& din) {
  const char* op = "gelu_backward";
  detail::require_same_shape(op, in, "in", dout, "dout");
  detail::require_same_shape(op, in, "in", din, "din");
  detail::require_same_dtypes(op, in, "in", {{&dout, "dout"}, {&din, "din"}});
  require_storage_dtype(op, in, "in");
  kernels::gelu_backward(in.dtype(), dout.data(), in.data(), in.numel(), din.data(), stream());
}

void activation_forward(Activation kind, const Tensor& in, const Tensor& out) {
  const char* op = kind == Activation::tanh ? "tanh_forward" : "gelu_erf_forward";
  detail::require_same_shape(op, in, "in", out, "out");
  detail::require_same_dtype(op, in, "in", out, "out");
  require_storage_dtype(op, in, "in");
  kernels::activation_forward(kind == Activation::tanh, in.dtype(), in.data(), in.numel(), out.data(), stream());
}

void activation_backward(Activation kind, const Tensor& dout, const Tensor& in, const Tensor& din) {
  const char* op = kind == Activation::tanh ? "tanh_backward" : "gelu_erf_backward";
  detail::require_same_shape(op, in, "in", dout, "dout");
  detail::require_same_shape(op, in, "in", din, "din");
  detail::require_same_dtypes(op, in, "in", {{&dout, "dout"}, {&din, "din"}});
  require_storage_dtype(op, in, "in");
  kernels::activation_backward(kind == Activation::tanh, in.dtype(), dout.data(), in.data(), in.numel(), din.data(),
                               stream());
}

namespace {
void run_dropout(const char* op, const Tensor& in, double p, const RandomStream& rng, uint64_t offset,
                 const Tensor& out) {
  TESSERA_CHECK(p >= 0.0 && p < 1.0, op, ": dropout probability must be in [0, 1), got ", p);
  detail::require_same_shape(op, in, "in", out, "out");
  detail::require_same_dtype(op, in, "in", out, "out");
  require_storage_dtype(op, in, "in");
  kernels::dropout_apply(in.dtype(), in.data(), in.numel(), dropout_args(rng, p, offset), out.data(), stream());
}
}  // namespace

void dropout_forward(const Tensor& in, double p, const RandomStream& rng, uint64_t offset, const Tensor& out) {
  run_dropout("dropout_forward", in, p, rng, offset, out);
}

void dropout_backward(const Tensor& dout, double p, const RandomStream& rng, uint64_t offset, const Tensor& din) {
  run_dropout("dropout_backward", dout, p, rng, offset, din);
}

void add(const Tensor& a, const Tensor& b, const Tensor& out) {
  const char* op = "add";
  detail::require_same_shape(op, a, "a", b, "b");
  detail::require_same_shape(op, a, "a", out, "out");
  detail::require_same_dtypes(op, a, "a", {{&b, "b"}, {&out, "out"}});
  require_storage_dtype(op, a, "a");
  kernels::add(a.dtype(), a.data(), b.data(), a.numel(), out.data(), stream());
}

void add_inplace(const Tensor& dst, const Tensor& src) {
  const char* op = "add_inplace";
  detail::require_same_shape(op, dst, "dst", src, "src");
  detail::require_same_dtype(op, dst, "dst", src, "src");
  require_storage_dtype(op, dst, "dst");
  kernels::add(dst.dtype(), dst.data(), src.data(), dst.numel(), dst.data(), stream());
}

void scale_inplace(const Tensor& dst, double factor) {
  require_storage_dtype("scale_inplace", dst, "dst");
  kernels::scale(dst.dtype(), dst.data(), dst.numel(), factor, stream());
}

void fill(const Tensor& dst, double value) {
  if (dtype_is_floating(dst.dtype())) require_storage_dtype("fill", dst, "dst");
  kernels::fill(dst.dtype(), dst.data(), dst.numel(), value, stream());
}

void copy(const Tensor& src, const Tensor& dst) {
  const char* op = "copy";
  detail::require_same_shape(op, src, "src", dst, "dst");
  if (src.nbytes() == 0 || src.data() == dst.data()) return;
  if (src.dtype() == dst.dtype()) {
    const cudaMemcpyKind kind = src.device().is_cuda()
                                    ? (dst.device().is_cuda() ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost)
                                    : (dst.device().is_cuda() ? cudaMemcpyHostToDevice : cudaMemcpyHostToHost);
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), src.nbytes(), kind, stream()));
    if (kind == cudaMemcpyDeviceToHost) TESSERA_CUDA_CHECK(cudaStreamSynchronize(stream()));
    return;
  }
  TESSERA_CHECK(src.device().is_cuda() && dst.device().is_cuda(), op,
                ": a converting copy must stay on one device, got ", src.describe(), " -> ", dst.describe());
  require_storage_dtype(op, src, "src (converting copy)");
  require_storage_dtype(op, dst, "dst (converting copy)");
  kernels::convert(src.dtype(), src.data(), dst.dtype(), dst.data(), src.numel(), stream());
}

void sum_of_squares_accumulate(const Tensor& t, double* device_total) {
  require_storage_dtype("sum_of_squares", t, "t");
  kernels::sum_of_squares(t.dtype(), t.data(), t.numel(), device_total, stream(),
                          CudaContext::get().partials_if_deterministic(kernels::kReductionPartials));
}

DeferredSum masked_sum_deferred(const Tensor& values, const Tensor& mask) {
  require_storage_dtype("masked_sum", values, "values");
  CudaContext& context = CudaContext::get();
  // The device scalar is reused by the next reduction only after this copy (stream order).
  TESSERA_CUDA_CHECK(cudaMemsetAsync(context.device_scalar(), 0, sizeof(double), context.stream()));
  kernels::masked_sum(values.dtype(), values.data(), mask.data(), values.numel(), context.device_scalar(),
                      context.stream(), context.partials_if_deterministic(kernels::kReductionPartials));
  return DeferredSum(read_device_double_async(context.device_scalar(), context.stream()));
}

double sum_of_squares(const Tensor& t) {
  CudaContext& context = CudaContext::get();
  TESSERA_CUDA_CHECK(cudaMemsetAsync(context.device_scalar(), 0, sizeof(double), context.stream()));
  sum_of_squares_accumulate(t, context.device_scalar());
  TESSERA_CUDA_CHECK(cudaMemcpyAsync(context.host_scalar(), context.device_scalar(), sizeof(double),
                                     cudaMemcpyDeviceToHost, context.stream()));
  TESSERA_CUDA_CHECK(cudaStreamSynchronize(context.stream()));
  return *context.host_scalar();
}

void adamw_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                  const AdamWParams& p) {
  const char* op = "adamw_update";
  TESSERA_CHECK(p.step >= 1, op, ": step counts from 1, got ", p.step);
  TESSERA_CHECK(p.beta1 >= 0.0 && p.beta1 < 1.0 && p.beta2 >= 0.0 && p.beta2 < 1.0, op,
                ": beta1 and beta2 must be in [0, 1), got ", p.beta1, " and ", p.beta2);
  TESSERA_CHECK(p.eps > 0.0, op, ": eps must be positive, got ", p.eps);
  for (const auto& [t, name] : {std::pair<const Tensor*, const char*>{&grad, "grad"}, {&exp_avg, "exp_avg"},
                                {&exp_avg_sq, "exp_avg_sq"}})
    detail::require_same_shape(op, param, "param", *t, name);
  detail::require_dtype(op, param, DType::f32, "param (the fp32 main parameter on CUDA)");
  detail::require_same_dtypes(op, param, "param", {{&grad, "grad"}, {&exp_avg, "exp_avg"}, {&exp_avg_sq, "exp_avg_sq"}});
  const double bc1 = 1.0 - std::pow(p.beta1, static_cast<double>(p.step));
  const double bc2 = 1.0 - std::pow(p.beta2, static_cast<double>(p.step));
  kernels::adamw(static_cast<float*>(param.data()), static_cast<const float*>(grad.data()),
                 static_cast<float*>(exp_avg.data()), static_cast<float*>(exp_avg_sq.data()), param.numel(),
                 static_cast<float>(p.lr), static_cast<float>(p.beta1), static_cast<float>(p.beta2),
                 static_cast<float>(p.eps), static_cast<float>(p.weight_decay), static_cast<float>(bc1),
                 static_cast<float>(bc2), stream());
}

void synchronize() { TESSERA_CUDA_CHECK(cudaStreamSynchronize(CudaContext::get().stream())); }

}  // namespace tessera::ops::cuda
