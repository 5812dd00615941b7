// A GPT block's linear at a decode step, with what surrounds it fused on the GPU:
//   out = epilogue(linear(layernorm?(in))),  epilogue: none | GeLU (tanh or erf) | + residual.
// On the CPU (the reference) and wherever the fused CUDA kernel does not take the shape (more than
// kSkinnyMaxRows rows, f32, unaligned rows, ...) it runs the separate ops (layernorm_forward,
// linear_forward, gelu / activation_forward, add) on arena scratch. On CUDA with bf16/f16 and up to
// eight rows one kernel does it all (kernels/decode_linear.cu), launched with programmatic
// dependent launch so its weight loads overlap the previous kernel; it rounds where the separate ops
// round, so both agree up to fp32 summation order.
// TESSERA_DECODE_FUSION=0 in the environment turns the fused decode block off (nn::TransformerLayer
// then runs the separate ops); TESSERA_DECODE_PDL=0 launches the fused kernel and the cached
// attention's kernels without programmatic dependent launch. All are for measurements.
#pragma once
#include "tessera/core/buffer.h"
#include "tessera/core/tensor.h"

namespace tessera::ops {

enum class DecodeEpilogue { none, gelu_tanh, gelu_erf, residual_add };

struct DecodeLinear {
  Tensor ln_weight, ln_bias;  // LayerNorm of the input first (undefined ln_weight: none), [k_in] each
  double ln_eps = 1e-5;
  Tensor weight;  // [n_out, k_in]
  Tensor bias;    // [n_out] or undefined
  DecodeEpilogue epilogue = DecodeEpilogue::none;
  Tensor residual;  // [rows, n_out] for residual_add
};

// in [rows, k_in] -> out [rows, n_out] (out must not alias in or residual). arena: scratch of the
// unfused path (the LayerNorm output and statistics, the linear's output before the epilogue).
void decode_linear_forward(Arena& arena, const Tensor& in, const DecodeLinear& d, const Tensor& out);
// Whether decode_linear_forward runs as one CUDA kernel for these tensors.
bool decode_linear_fuses(const Tensor& in, const DecodeLinear& d, const Tensor& out);

// The decode path's A/B switches for measurements, read from the environment once, in one place.
struct DecodeSwitches {
  // TESSERA_DECODE_FUSION is not "0": the decode step's LayerNorm + linear + epilogue fused.
  bool fusion = true;
  // TESSERA_DECODE_PDL is not "0": the fused decode linear and the cached attention's kernels
  // launch with programmatic dependent launch.
  bool programmatic_launch = true;
  // TESSERA_DECODE_BLOCKS_PER_SM (unset: -1, the kernel's own choice): the fused kernel's blocks per SM.
  int blocks_per_sm = -1;
};
const DecodeSwitches& decode_switches();

}  // namespace tessera::ops
