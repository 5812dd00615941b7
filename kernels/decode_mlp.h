// Launch declarations of the fused decode MLP (decode_mlp.cu): a GPT block's whole MLP at a decode
// step of up to kSkinnyMaxRows rows, bf16/f16, as one kernel split over the FFN dimension:
//   out = h + fc2(gelu(fc1(layernorm(h))))
// Block b computes the activations of its FFN slice (LayerNorm prologue, fc1 GEMV + bias, GeLU) and
// multiplies them by the same slice of fc2's weight, read from a transposed copy ([ffn, hidden]: the
// slice is contiguous rows) that it copies into shared memory before the grid dependency wait. The
// blocks' partial sums go to a workspace; after a grid-wide barrier each block adds up its share of
// the output columns in a fixed order (runs are bitwise reproducible) and adds bias and residual.
// Programmatic dependent launch as the fused decode linear (decode_linear.h).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "tessera/core/dtype.h"

namespace tessera::kernels {

enum class DecodeGelu : int { tanh = 0, erf = 1 };

struct DecodeMlpArgs {
  const void* in = nullptr;  // h [rows, hidden]: the LayerNorm's input and the residual
  const void* ln_weight = nullptr;
  const void* ln_bias = nullptr;
  float ln_eps = 1e-5f;
  const void* fc1_weight = nullptr;    // [ffn, hidden]
  const void* fc1_bias = nullptr;      // [ffn] or null
  const void* fc2_weight_t = nullptr;  // fc2's weight transposed: [ffn, hidden]
  const void* fc2_bias = nullptr;      // [hidden] or null
  DecodeGelu gelu = DecodeGelu::tanh;
  // decode_mlp_workspace_bytes(...) bytes, zero before the first launch (its barrier's words; each
  // launch leaves them ready for the next). Launches sharing one workspace must not overlap (one
  // stream: a launch cannot start its barrier before the previous kernel has finished).
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  void* out = nullptr;  // [rows, hidden]; must not alias in
  int64_t rows = 0, hidden = 0, ffn = 0;
  bool programmatic = true;  // as DecodeLinearArgs::programmatic
  int blocks_per_sm = -1;    // < 0: the occupancy; > 0: at most that many
  bool shared_fc2 = false;   // fc2's slice copied into shared memory (cp.async) instead of a register ring
};

// The workspace a launch of these dimensions needs (0 when the kernel does not take them).
size_t decode_mlp_workspace_bytes(DType t, int64_t rows, int64_t hidden, int64_t ffn);
// Whether decode_mlp_forward takes the shape and pointers: bf16/f16, 1..kSkinnyMaxRows rows, hidden a
// multiple of 8 and <= 2048 (the LayerNorm prologue: one 16-byte vector of each row per thread),
// 16-byte aligned tensors, and a block's fc2 slice fitting in shared memory.
bool decode_mlp_applies(DType t, const DecodeMlpArgs& a);
void decode_mlp_forward(DType t, const DecodeMlpArgs& a, cudaStream_t s);

}  // namespace tessera::kernels
