// Launch declarations of the fused decode linear (decode_linear.cu): one kernel for a GPT block's
// linear at a decode step of up to kSkinnyMaxRows rows, bf16/f16: an optional LayerNorm of the input
// rows in every block's prologue, the GEMV with bias, and an optional epilogue (GeLU, or a residual
// add). Launched with programmatic dependent launch (sm_90) so it streams its first weight tiles
// while the previous kernel finishes (ops/decode_linear.h).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "tessera/core/dtype.h"

namespace tessera::kernels {

enum class DecodeEpilogue : int { none = 0, gelu_tanh = 1, gelu_erf = 2, residual_add = 3 };

struct DecodeLinearArgs {
  const void* in = nullptr;  // [rows, k_in]
  // LayerNorm of `in` first (null ln_weight: none): y = (x - mean) rstd ln_weight + ln_bias, fp32
  // statistics, y rounded to the dtype (as the LayerNorm kernel's output) before the GEMV.
  const void* ln_weight = nullptr;
  const void* ln_bias = nullptr;
  float ln_eps = 1e-5f;
  const void* weight = nullptr;  // [n_out, k_in]
  const void* bias = nullptr;    // [n_out] or null
  DecodeEpilogue epilogue = DecodeEpilogue::none;
  const void* residual = nullptr;  // [rows, n_out] for residual_add
  void* out = nullptr;             // [rows, n_out]; must not alias in or residual
  int64_t rows = 0, n_out = 0, k_in = 0;
  // Programmatic dependent launch (cudaLaunchAttributeProgrammaticStreamSerialization); the kernel
  // waits for the previous grid before reading anything it wrote.
  bool programmatic = true;
  // Grid: blocks per SM, the output rows split evenly over them (< 0: the occupancy, one full wave;
  // 0: 8 output rows a block; > 0: that many, at most the occupancy).
  int blocks_per_sm = -1;
};

// Whether decode_linear_forward takes the shape and pointers: bf16/f16, 1..kSkinnyMaxRows rows,
// k_in % 8 == 0, 16-byte aligned in, weight (and LayerNorm parameters), and with a LayerNorm
// k_in <= 2048 (one 16-byte vector of each row per thread) and rows * k_in elements <= 48 KiB.
bool decode_linear_applies(DType t, const DecodeLinearArgs& a);
void decode_linear_forward(DType t, const DecodeLinearArgs& a, cudaStream_t s);

}  // namespace tessera::kernels
