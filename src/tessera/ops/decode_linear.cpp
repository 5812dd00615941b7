// Fused decode linear dispatch: the CUDA kernel when it takes the tensors, else the separate ops.
#include "tessera/ops/decode_linear.h"

#include <cstdlib>
#include <cstring>

#include "tessera/ops/activation.h"
#include "tessera/ops/cuda_dispatch.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/layernorm.h"
#include "tessera/ops/linear.h"

namespace tessera::ops {

namespace {
bool present(const Tensor& t) { return t.defined() && t.data() != nullptr; }

void check(const char* op, const Tensor& in, const DecodeLinear& d, const Tensor& out) {
  detail::require_defined(op, in, "in");
  detail::require_defined(op, d.weight, "weight");
  detail::require_defined(op, out, "out");
  TESSERA_CHECK(in.ndim() == 2 && d.weight.ndim() == 2 && in.dim(1) == d.weight.dim(1), op,
                ": in must be [rows, k_in] and weight [n_out, k_in], got ", in.describe(), " and ",
                d.weight.describe());
  TESSERA_CHECK(out.shape() == Shape({in.dim(0), d.weight.dim(0)}), op, ": out must be [", in.dim(0), ", ",
                d.weight.dim(0), "], got ", out.describe());
  if (present(d.ln_weight))
    TESSERA_CHECK(present(d.ln_bias) && d.ln_weight.shape() == Shape{in.dim(1)} && d.ln_bias.shape() == Shape{in.dim(1)},
                  op, ": ln_weight and ln_bias must both be [", in.dim(1), "]");
  if (d.epilogue == DecodeEpilogue::residual_add) {
    detail::require_defined(op, d.residual, "residual");
    detail::require_same_shape(op, out, "out", d.residual, "residual");
    TESSERA_CHECK(d.residual.data() != out.data(), op, ": out must not alias residual");
  }
  TESSERA_CHECK(in.data() != out.data(), op, ": out must not alias in");
}
}  // namespace

namespace {
// The variable's value as an integer; `unset` when it is unset or empty.
int integer_variable(const char* variable, int unset) {
  const char* v = std::getenv(variable);
  return v && *v ? std::atoi(v) : unset;
}
bool variable_is(const char* variable, const char* value) {
  const char* v = std::getenv(variable);
  return v && std::strcmp(v, value) == 0;
}
}  // namespace

const DecodeSwitches& decode_switches() {
  static const DecodeSwitches switches = [] {
    DecodeSwitches s;
    s.fusion = !variable_is("TESSERA_DECODE_FUSION", "0");
    s.programmatic_launch = !variable_is("TESSERA_DECODE_PDL", "0");
    s.blocks_per_sm = integer_variable("TESSERA_DECODE_BLOCKS_PER_SM", -1);
    return s;
  }();
  return switches;
}

bool decode_linear_fuses(const Tensor& in, const DecodeLinear& d, const Tensor& out) {
  if (!in.device().is_cuda()) return false;
  const char* op = "decode_linear_fuses";
  if (!detail::runs_on_cuda(op, {&in, &d.weight, &out})) return false;
  return TESSERA_CUDA_VALUE(decode_linear_fuses(in, d, out));
}

void decode_linear_forward(Arena& arena, const Tensor& in, const DecodeLinear& d, const Tensor& out) {
  const char* op = "decode_linear_forward";
  check(op, in, d, out);
  if (decode_linear_fuses(in, d, out)) return TESSERA_CUDA_OP(decode_linear_forward(in, d, out));
  Tensor x = in;
  if (present(d.ln_weight)) {
    x = arena.allocate(in.dtype(), in.shape());
    // Statistics in fp32 on a GPU, the input dtype on the CPU: as nn::LayerNorm.
    const DType stats = in.device().is_cuda() ? DType::f32 : in.dtype();
    Tensor mean = arena.allocate(stats, {in.dim(0)}), rstd = arena.allocate(stats, {in.dim(0)});
    layernorm_forward(in, d.ln_weight, d.ln_bias, d.ln_eps, x, mean, rstd);
  }
  if (d.epilogue == DecodeEpilogue::none) return linear_forward(x, d.weight, d.bias, out);
  Tensor linear = arena.allocate(in.dtype(), out.shape());
  linear_forward(x, d.weight, d.bias, linear);
  switch (d.epilogue) {
    case DecodeEpilogue::gelu_tanh: gelu_forward(linear, out); break;
    case DecodeEpilogue::gelu_erf: activation_forward(Activation::gelu_erf, linear, out); break;
    case DecodeEpilogue::residual_add: add(d.residual, linear, out); break;
    case DecodeEpilogue::none: break;
  }
}

}  // namespace tessera::ops
