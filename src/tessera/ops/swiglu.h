// SwiGLU (Shazeer, "GLU Variants Improve Transformer"; Llama's and Megatron's --swiglu MLP) on the
// fused gate/up projection: in [n, 2f] holds each hidden unit's gate and up values side by side,
// in[r, 2j] = gate_j, in[r, 2j+1] = up_j (so any contiguous column block of in, e.g. a tensor-parallel
// rank's, holds whole (gate, up) pairs); out[r, j] = silu(gate_j) * up_j, silu(x) = x sigmoid(x).
#pragma once
#include <utility>

#include "tessera/core/tensor.h"

namespace tessera::ops {

// in [n, 2f] -> out [n, f], same float dtype and device.
void swiglu_forward(const Tensor& in, const Tensor& out);
// dout [n, f], in [n, 2f] -> din [n, 2f] (overwritten).
void swiglu_backward(const Tensor& dout, const Tensor& in, const Tensor& din);

// GeGLU (T5 v1.1's gated-gelu feed-forward) on the same interleaved pairs:
// out[r, j] = gelu_tanh(gate_j) * up_j (GPT-2's / HF's gelu_new, ops/activation.h).
void geglu_forward(const Tensor& in, const Tensor& out);
void geglu_backward(const Tensor& dout, const Tensor& in, const Tensor& din);

namespace detail {
// Shape checks shared by the CPU and CUDA paths; returns {rows n, units f}.
std::pair<int64_t, int64_t> check_swiglu_shapes(const char* op, const Tensor& in, const Tensor& half_width,
                                                const char* half_name);
}  // namespace detail

}  // namespace tessera::ops
