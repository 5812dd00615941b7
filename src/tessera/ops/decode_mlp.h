// A GPT block's dense MLP at a decode step, fused on the GPU:
//   out = h + fc2(gelu(fc1(layernorm(h))))
// On CUDA with bf16/f16 and up to kSkinnyMaxRows rows, and a DecodeMlpState prepared for the layer,
// one kernel does it all (kernels/decode_mlp.cu: split over the FFN dimension, fc2 read from a
// transposed copy, the blocks' partial sums added in fixed point, so runs are bitwise reproducible).
// Otherwise (the CPU, the reference; no state; a shape the kernel does not take) it runs as two fused
// decode linears (ops/decode_linear.h: [LN + fc1 + GeLU], [fc2 + residual]). Both round where the
// separate ops round, so they agree up to the order of the fp32 sums.
// TESSERA_DECODE_MLP=0 in the environment keeps the two linears (for measurements).
#pragma once
#include "tessera/core/buffer.h"
#include "tessera/core/tensor.h"

namespace tessera::ops {

// The fused kernel's workspace for a layer of these dimensions, in bytes: enough for every row count it
// takes (layers of one model, whose MLP kernels run one after another on one stream, can share one).
size_t decode_mlp_workspace_bytes(DType t, int64_t hidden, int64_t ffn);

// What the fused kernel needs beside the layer's parameters: fc2's weight transposed ([ffn, hidden],
// so a block's slice of the FFN dimension is contiguous) and a workspace of
// decode_mlp_workspace_bytes (zero-filled when given, as a new Buffer is). Built once the weights are
// final (it copies fc2's weight); it does not follow later changes to them.
class DecodeMlpState {
 public:
  DecodeMlpState() = default;
  // fc2_weight: [hidden, ffn] bf16/f16 on a CUDA device; workspace: u8 on the same device.
  DecodeMlpState(const Tensor& fc2_weight, const Tensor& workspace);
  bool ready() const { return fc2_weight_t_.defined(); }
  const Tensor& fc2_weight_t() const { return fc2_weight_t_; }
  const Tensor& workspace() const { return workspace_; }

 private:
  Buffer buffer_;
  Tensor fc2_weight_t_, workspace_;
};

struct DecodeMlp {
  Tensor ln_weight, ln_bias;  // [hidden] each
  double ln_eps = 1e-5;
  Tensor fc1_weight, fc1_bias;  // [ffn, hidden], [ffn] or undefined
  Tensor fc2_weight, fc2_bias;  // [hidden, ffn], [hidden] or undefined
  bool gelu_erf = false;        // erf GeLU instead of tanh
  const DecodeMlpState* state = nullptr;  // null or not ready: the two fused linears
};

// h [rows, hidden] -> out [rows, hidden] (out must not alias h). arena: the unfused path's scratch.
void decode_mlp_forward(Arena& arena, const Tensor& h, const DecodeMlp& m, const Tensor& out);
// Whether decode_mlp_forward runs as one CUDA kernel for these tensors.
bool decode_mlp_fuses(const Tensor& h, const DecodeMlp& m, const Tensor& out);
// TESSERA_DECODE_MLP is not "0" (read once).
bool decode_mlp_fusion_enabled();

}  // namespace tessera::ops
