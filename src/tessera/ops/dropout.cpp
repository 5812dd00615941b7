// Dropout dispatch: checks devices, dtypes, shapes and p, then runs the CPU reference (cpu/dropout.h).
#include "tessera/ops/dropout.h"

#include "tessera/ops/cpu/dropout.h"
#include "tessera/ops/half_compute.h"
#include "tessera/ops/cuda_dispatch.h"
#include "tessera/ops/op_checks.h"

namespace tessera::ops {

namespace {
void run_dropout(const char* op, const Tensor& in, const char* in_name, double p, const RandomStream& stream,
                 uint64_t index_offset, const Tensor& out, const char* out_name) {
  if (detail::is_half(in.dtype()) && in.device().is_cpu()) {  // bf16 / f16 on the CPU: f32 compute
    detail::compute_in_f32({in, out}, {false, true}, [&](const std::vector<Tensor>& t) {
      run_dropout(op, t[0], in_name, p, stream, index_offset, t[1], out_name);
    });
    return;
  }
  if (detail::runs_on_cuda(op, {&in, &out})) return TESSERA_CUDA_OP(dropout_forward(in, p, stream, index_offset, out));
  TESSERA_CHECK(p >= 0.0 && p < 1.0, op, ": dropout probability must be in [0, 1), got ", p);
  detail::require_same_shape(op, in, in_name, out, out_name);
  detail::require_same_dtype(op, in, in_name, out, out_name);
  detail::visit_f32_or_f64(op, in, in_name, [&](auto tag) {
    using T = decltype(tag);
    cpu::dropout_apply<T>(in.data_as<T>(), in.numel(), p, stream, index_offset, out.data_as<T>());
  });
}
}  // namespace

void dropout_forward(const Tensor& in, double p, const RandomStream& stream, uint64_t index_offset,
                     const Tensor& out) {
  run_dropout("dropout_forward", in, "in", p, stream, index_offset, out, "out");
}

void dropout_backward(const Tensor& dout, double p, const RandomStream& stream, uint64_t index_offset,
                      const Tensor& din) {
  run_dropout("dropout_backward", dout, "dout", p, stream, index_offset, din, "din");
}

}  // namespace tessera::ops
