// Dropout dispatch: checks devices, dtypes, shapes and p, then runs the CPU reference (cpu/dropout.h).
#include "tessera/ops/dropout.h"

#include "tessera/ops/cpu/dropout.h"
#include "tessera/ops/op_checks.h"

namespace tessera::ops {

namespace {
void run_dropout(const char* op, const Tensor& in, const char* in_name, double p, const RandomStream& stream,
                 uint64_t index_offset, const Tensor& out, const char* out_name) {
  detail::require_cpu(op, {&in, &out});
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
