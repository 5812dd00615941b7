// CUDA host side of the fused decode linear (kernels/decode_linear.cu): the kernel's arguments from
// the dispatcher's (ops/decode_linear.cpp) checked tensors, launched on CudaContext's stream.
#include <cstdlib>

#include "kernels/decode_linear.h"
#include "tessera/ops/cuda/cuda_context.h"
#include "tessera/ops/cuda/ops_cuda.h"
#include "tessera/ops/decode_linear.h"

namespace tessera::ops::cuda {

namespace {
bool present(const Tensor& t) { return t.defined() && t.data() != nullptr; }

// An integer switch for measurements, read once by the caller: the variable's value, `unset` without it.
int integer_switch(const char* variable, int unset) {
  const char* v = std::getenv(variable);
  return v && *v ? std::atoi(v) : unset;
}

// kernels::DecodeLinearArgs's measurement switches (TESSERA_DECODE_BULK and _EARLY_TRIGGER are
// ops/decode_linear.h's): TESSERA_DECODE_BLOCKS_PER_SM (blocks_per_sm, unset -1),
// TESSERA_DECODE_BULK_PIECES (bulk_pieces, unset 1), TESSERA_DECODE_BULK_ROWS (bulk_rows_per_block,
// unset 0).
int blocks_per_sm() {
  static const int value = integer_switch("TESSERA_DECODE_BLOCKS_PER_SM", -1);
  return value;
}
int bulk_rows_per_block() {
  static const int value = integer_switch("TESSERA_DECODE_BULK_ROWS", 0);
  return value;
}
int bulk_pieces() {
  static const int value = integer_switch("TESSERA_DECODE_BULK_PIECES", 1);
  return value;
}

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
  a.programmatic = decode_programmatic_launch();
  a.blocks_per_sm = blocks_per_sm();
  a.bulk_blocks_per_sm = decode_bulk_blocks_per_sm();
  a.max_shared_carveout = a.bulk_blocks_per_sm > 0;
  a.bulk_pieces = bulk_pieces();
  a.bulk_rows_per_block = bulk_rows_per_block();
  a.bulk_early_trigger = decode_early_trigger();
  return a;
}
}  // namespace

bool decode_linear_fuses(const Tensor& in, const DecodeLinear& d, const Tensor& out) {
  if (in.ndim() != 2 || d.weight.ndim() != 2 || out.ndim() != 2) return false;
  for (const Tensor* t : {&d.weight, &d.bias, &d.ln_weight, &d.ln_bias, &d.residual, &out})
    if (!same_dtype(in, *t)) return false;
  return kernels::decode_linear_applies(in.dtype(), args(in, d, out));
}

bool decode_linear_bulk_copies(const Tensor& in, const DecodeLinear& d, const Tensor& out) {
  return kernels::decode_linear_uses_bulk(in.dtype(), args(in, d, out));
}

void decode_linear_forward(const Tensor& in, const DecodeLinear& d, const Tensor& out) {
  kernels::decode_linear_forward(in.dtype(), args(in, d, out), CudaContext::get().stream());
}

}  // namespace tessera::ops::cuda
