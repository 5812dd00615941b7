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
// attention's kernels without programmatic dependent launch; TESSERA_DECODE_BULK selects the
// kernel's bulk-copy path (below). All are for measurements.
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
// Whether that kernel brings its weights in by bulk copies into shared memory (kernels/
// decode_linear_bulk.cu; DecodeSwitches::bulk_blocks_per_sm and the switches after it).
bool decode_linear_bulk_copies(const Tensor& in, const DecodeLinear& d, const Tensor& out);

// The decode path's A/B switches for measurements, read from the environment once, in one place.
struct DecodeSwitches {
  // TESSERA_DECODE_FUSION is not "0": the decode step's LayerNorm + linear + epilogue fused.
  bool fusion = true;
  // TESSERA_DECODE_PDL is not "0": the fused decode linear and the cached attention's kernels
  // launch with programmatic dependent launch.
  bool programmatic_launch = true;
  // TESSERA_DECODE_EARLY_TRIGGER is "1": the bulk-copy decode kernels and the cached attention's
  // whole-head kernel let the next kernel launch before their own grid dependency wait (it still
  // waits for their end), so its blocks can start their weight copies sooner.
  bool early_trigger = false;
  // TESSERA_DECODE_BLOCKS_PER_SM (unset: -1, the kernel's own choice): the register path's blocks per SM.
  int blocks_per_sm = -1;
  // TESSERA_DECODE_BULK=P (unset or 0: off, the register path): blocks per SM of the bulk-copy path,
  // taken where a block's share fits. While it is on, every decode kernel asks for the largest
  // shared-memory carveout.
  int bulk_blocks_per_sm = 0;
  // TESSERA_DECODE_BULK_PIECES (unset: 1; 1..8): the copies a warp's share is cut into.
  int bulk_pieces = 1;
  // TESSERA_DECODE_BULK_ROWS=R (unset: 0, one wave): bulk blocks of R output rows.
  int bulk_rows_per_block = 0;
  // TESSERA_GENERATE_RUN_AHEAD=W (unset: 0, off): greedy decode steps the GPU runs ahead of the host
  // (generate/generator.h, which bounds it).
  int run_ahead_steps = 0;
};
const DecodeSwitches& decode_switches();

}  // namespace tessera::ops
