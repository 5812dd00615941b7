// SwiGLU dispatch: checks shapes, dtypes and devices, then runs the CPU reference (cpu/swiglu.h) or
// the CUDA kernel (kernels/swiglu.cu through ops/cuda/elementwise_ops_cuda.cpp).
#include "tessera/ops/swiglu.h"

#include "tessera/ops/cpu/swiglu.h"
#include "tessera/ops/cuda_dispatch.h"
#include "tessera/ops/half_compute.h"
#include "tessera/ops/op_checks.h"
#ifdef TESSERA_HAVE_CUDA
#include "tessera/ops/cuda/t5_ops_cuda.h"
#endif

namespace tessera::ops {

namespace detail {
std::pair<int64_t, int64_t> check_swiglu_shapes(const char* op, const Tensor& in, const Tensor& half_width,
                                                const char* half_name) {
  require_defined(op, in, "in");
  require_defined(op, half_width, half_name);
  if (in.ndim() != 2 || in.dim(1) % 2 != 0)
    TESSERA_FAIL(op, ": in must be [n, 2f] (interleaved gate, up pairs), got ", in.describe());
  const Shape want{in.dim(0), in.dim(1) / 2};
  if (half_width.shape() != want)
    TESSERA_FAIL(op, ": ", half_name, " must be [", want[0], ", ", want[1], "] for in ", in.describe(), ", got ",
                 half_width.describe());
  require_same_dtype(op, in, "in", half_width, half_name);
  return {want[0], want[1]};
}
}  // namespace detail

namespace {

// SwiGLU and GeGLU differ only in their gate's activation: one dispatch each way for both.
enum class Gate { swiglu, geglu };

void gated_forward(Gate gate, const Tensor& in, const Tensor& out) {
  const char* op = gate == Gate::swiglu ? "swiglu_forward" : "geglu_forward";
  if (detail::is_half(in.dtype()) && in.device().is_cpu()) {  // bf16 / f16 on the CPU: f32 compute
    detail::compute_in_f32({in, out}, {false, true},
                           [&](const std::vector<Tensor>& t) { gated_forward(gate, t[0], t[1]); });
    return;
  }
  if (detail::runs_on_cuda(op, {&in, &out})) {
    if (gate == Gate::swiglu) return TESSERA_CUDA_OP(swiglu_forward(in, out));
    return TESSERA_CUDA_OP(geglu_forward(in, out));
  }
  const auto [n, f] = detail::check_swiglu_shapes(op, in, out, "out");
  const int64_t count = n * f;  // clang 14 cannot capture a structured binding in a lambda
  detail::visit_f32_or_f64(op, in, "in", [&](auto tag) {
    using T = decltype(tag);
    if (gate == Gate::swiglu) cpu::swiglu_forward<T>(in.data_as<T>(), count, out.data_as<T>());
    else cpu::geglu_forward<T>(in.data_as<T>(), count, out.data_as<T>());
  });
}

void gated_backward(Gate gate, const Tensor& dout, const Tensor& in, const Tensor& din) {
  const char* op = gate == Gate::swiglu ? "swiglu_backward" : "geglu_backward";
  if (detail::is_half(in.dtype()) && in.device().is_cpu()) {  // bf16 / f16 on the CPU: f32 compute
    detail::compute_in_f32({dout, in, din}, {false, false, true},
                           [&](const std::vector<Tensor>& t) { gated_backward(gate, t[0], t[1], t[2]); });
    return;
  }
  if (detail::runs_on_cuda(op, {&dout, &in, &din})) {
    if (gate == Gate::swiglu) return TESSERA_CUDA_OP(swiglu_backward(dout, in, din));
    return TESSERA_CUDA_OP(geglu_backward(dout, in, din));
  }
  const auto [n, f] = detail::check_swiglu_shapes(op, in, dout, "dout");
  detail::require_same_shape(op, in, "in", din, "din");
  detail::require_same_dtype(op, in, "in", din, "din");
  TESSERA_CHECK(din.data() != in.data() || in.numel() == 0, op, ": din must not alias in");
  const int64_t count = n * f;  // clang 14 cannot capture a structured binding in a lambda
  detail::visit_f32_or_f64(op, in, "in", [&](auto tag) {
    using T = decltype(tag);
    if (gate == Gate::swiglu) cpu::swiglu_backward<T>(dout.data_as<T>(), in.data_as<T>(), count, din.data_as<T>());
    else cpu::geglu_backward<T>(dout.data_as<T>(), in.data_as<T>(), count, din.data_as<T>());
  });
}

}  // namespace

void swiglu_forward(const Tensor& in, const Tensor& out) { gated_forward(Gate::swiglu, in, out); }
void swiglu_backward(const Tensor& dout, const Tensor& in, const Tensor& din) {
  gated_backward(Gate::swiglu, dout, in, din);
}
void geglu_forward(const Tensor& in, const Tensor& out) { gated_forward(Gate::geglu, in, out); }
void geglu_backward(const Tensor& dout, const Tensor& in, const Tensor& din) {
  gated_backward(Gate::geglu, dout, in, din);
}

}  // namespace tessera::ops
