// CUDA host side of the fused decode linear (kernels/decode_linear.cu): the kernel's arguments from
// the dispatcher's (ops/decode_linear.cpp) checked tensors, launched on CudaContext's stream.
#include "kernels/decode_linear.h"
#include "tessera/ops/cuda/cuda_context.h"
#include "tessera/ops/cuda/ops_cuda.h"
#include "tessera/ops/decode_linear.h"

namespace tessera::ops::cuda {

namespace {
bool present(const Tensor& t) { return t.defined() && t.data() != nullptr; }

bool same_dtype(const Tensor& a, const Tensor& b) { return !present(b) || a.dtype() == b.dtype(); }

kernels::DecodeLinearArgs args(const Tensor& in, const DecodeLinear& d, const Tensor& out) {
  kernels::DecodeLinearArgs a;
  a.in = in.data();
  if (present(d.ln_weight)) {
    a.ln_weight = d.ln_weight.data();
    a.ln_bias = present(d.ln_bias) ? d.ln_bias.data() : nullptr;
    a.ln_eps = static_cast<float>(d.ln_eps);
  }
  a.weight = d.weight.data();
  a.bias = present(d.bias) ? d.bias.data() : nullptr;
  a.epilogue = static_cast<kernels::DecodeEpilogue>(static_cast<int>(d.epilogue));
  a.residual = d.epilogue == DecodeEpilogue::residual_add && present(d.residual) ? d.residual.data() : nullptr;
  a.out = out.data();
  a.rows = in.dim(0);
  a.n_out = d.weight.dim(0);
  a.k_in = in.dim(1);
  const DecodeSwitches& switches = decode_switches();
  a.programmatic = switches.programmatic_launch;
  a.blocks_per_sm = switches.blocks_per_sm;
  return a;
}
}  // namespace

bool decode_linear_fuses(const Tensor& in, const DecodeLinear& d, const Tensor& out) {
  if (in.ndim() != 2 || d.weight.ndim() != 2 || out.ndim() != 2) return false;
  for (const Tensor* t : {&d.weight, &d.bias, &d.ln_weight, &d.ln_bias, &d.residual, &out})
    if (!same_dtype(in, *t)) return false;
  return kernels::decode_linear_applies(in.dtype(), args(in, d, out));
}

void decode_linear_forward(const Tensor& in, const DecodeLinear& d, const Tensor& out) {
  kernels::decode_linear_forward(in.dtype(), args(in, d, out), CudaContext::get().stream());
}

}  // namespace tessera::ops::cuda
