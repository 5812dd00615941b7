// GeLU dispatch: checks devices, dtypes and shapes, then runs the CPU reference (cpu/activation.h).
#include "tessera/ops/activation.h"

#include "tessera/ops/cpu/activation.h"
#include "tessera/ops/half_compute.h"
#include "tessera/ops/cuda_dispatch.h"
#include "tessera/ops/op_checks.h"
#ifdef TESSERA_HAVE_CUDA
#include "tessera/ops/cuda/t5_ops_cuda.h"
#endif

namespace tessera::ops {

void gelu_forward(const Tensor& in, const Tensor& out) {
  const char* op = "gelu_forward";
  if (detail::is_half(in.dtype()) && in.device().is_cpu()) {  // bf16 / f16 on the CPU: f32 compute
    detail::compute_in_f32({in, out}, {false, true}, [&](const std::vector<Tensor>& t) { gelu_forward(t[0], t[1]); });
    return;
  }
  if (detail::runs_on_cuda(op, {&in, &out})) return TESSERA_CUDA_OP(gelu_forward(in, out));
  detail::require_same_shape(op, in, "in", out, "out");
  detail::require_same_dtype(op, in, "in", out, "out");
  detail::visit_f32_or_f64(op, in, "in", [&](auto tag) {
    using T = decltype(tag);
    cpu::gelu_forward<T>(in.data_as<T>(), in.numel(), out.data_as<T>());
  });
}

void gelu_backward(const Tensor& dout, const Tensor& in, const Tensor& din) {
  const char* op = "gelu_backward";
  if (detail::is_half(in.dtype()) && in.device().is_cpu()) {  // bf16 / f16 on the CPU: f32 compute
    detail::compute_in_f32({dout, in, din}, {false, false, true}, [&](const std::vector<Tensor>& t) { gelu_backward(t[0], t[1], t[2]); });
    return;
  }
  if (detail::runs_on_cuda(op, {&dout, &in, &din})) return TESSERA_CUDA_OP(gelu_backward(dout, in, din));
  detail::require_same_shape(op, in, "in", dout, "dout");
  detail::require_same_shape(op, in, "in", din, "din");
  detail::require_same_dtypes(op, in, "in", {{&dout, "dout"}, {&din, "din"}});
  detail::visit_f32_or_f64(op, in, "in", [&](auto tag) {
    using T = decltype(tag);
    cpu::gelu_backward<T>(dout.data_as<T>(), in.data_as<T>(), in.numel(), din.data_as<T>());
  });
}

const char* activation_op_name(Activation kind, bool backward) {
  switch (kind) {
    case Activation::tanh: return backward ? "tanh_backward" : "tanh_forward";
    case Activation::relu: return backward ? "relu_backward" : "relu_forward";
    default: return backward ? "gelu_erf_backward" : "gelu_erf_forward";
  }
}

void activation_forward(Activation kind, const Tensor& in, const Tensor& out) {
  const char* op = activation_op_name(kind, false);
  if (detail::is_half(in.dtype()) && in.device().is_cpu()) {  // bf16 / f16 on the CPU: f32 compute
    detail::compute_in_f32({in, out}, {false, true},
                           [&](const std::vector<Tensor>& t) { activation_forward(kind, t[0], t[1]); });
    return;
  }
  if (detail::runs_on_cuda(op, {&in, &out})) {
    if (kind == Activation::relu) return TESSERA_CUDA_OP(relu_forward(in, out));
    return TESSERA_CUDA_OP(activation_forward(kind, in, out));
  }
  detail::require_same_shape(op, in, "in", out, "out");
  detail::require_same_dtype(op, in, "in", out, "out");
  detail::visit_f32_or_f64(op, in, "in", [&](auto tag) {
    using T = decltype(tag);
    if (kind == Activation::tanh) cpu::tanh_forward<T>(in.data_as<T>(), in.numel(), out.data_as<T>());
    else if (kind == Activation::relu) cpu::relu_forward<T>(in.data_as<T>(), in.numel(), out.data_as<T>());
    else cpu::gelu_erf_forward<T>(in.data_as<T>(), in.numel(), out.data_as<T>());
  });
}

void activation_backward(Activation kind, const Tensor& dout, const Tensor& in, const Tensor& din) {
  const char* op = activation_op_name(kind, true);
  if (detail::is_half(in.dtype()) && in.device().is_cpu()) {  // bf16 / f16 on the CPU: f32 compute
    detail::compute_in_f32({dout, in, din}, {false, false, true},
                           [&](const std::vector<Tensor>& t) { activation_backward(kind, t[0], t[1], t[2]); });
    return;
  }
  if (detail::runs_on_cuda(op, {&dout, &in, &din})) {
    if (kind == Activation::relu) return TESSERA_CUDA_OP(relu_backward(dout, in, din));
    return TESSERA_CUDA_OP(activation_backward(kind, dout, in, din));
  }
  detail::require_same_shape(op, in, "in", dout, "dout");
  detail::require_same_shape(op, in, "in", din, "din");
  detail::require_same_dtypes(op, in, "in", {{&dout, "dout"}, {&din, "din"}});
  detail::visit_f32_or_f64(op, in, "in", [&](auto tag) {
    using T = decltype(tag);
    if (kind == Activation::tanh)
      cpu::tanh_backward<T>(dout.data_as<T>(), in.data_as<T>(), in.numel(), din.data_as<T>());
    else if (kind == Activation::relu)
      cpu::relu_backward<T>(dout.data_as<T>(), in.data_as<T>(), in.numel(), din.data_as<T>());
    else cpu::gelu_erf_backward<T>(dout.data_as<T>(), in.data_as<T>(), in.numel(), din.data_as<T>());
  });
}

}  // namespace tessera::ops
