// Rotary position embedding (Megatron's apply_rotary_pos_emb, non-interleaved "rotate_half" as in
// Megatron core / HF Llama by default), in place: inv_freq[i] = theta^(-2i/rd) (fp32 on CUDA, double
// on the CPU), pair (i, i + rd/2) (or (2i, 2i+1) interleaved) rotated by position * inv_freq[i],
// rd = the rotary dim (RopeHeads::rotary_dim; the whole head by default).
#pragma once
#include <cstdint>

#include "tessera/core/tensor.h"

namespace tessera::ops {

// Which head vectors of a row [s, b, row_width] rotate: `groups` groups, group_stride elements apart,
// each of `heads` consecutive vectors of head_dim (even) elements, the first at element `offset`.
// Megatron's fused QKV [s, b, (na + 2 ng) hn] with hpg = na / ng: the queries are
// {offset 0, heads hpg, head_dim hn, groups ng, group_stride (hpg + 2) hn}, the keys
// {offset hpg hn, heads 1, head_dim hn, groups ng, group_stride (hpg + 2) hn}.
struct RopeHeads {
  int64_t offset = 0;
  int64_t heads = 0;
  int64_t head_dim = 0;
  int64_t groups = 1;
  int64_t group_stride = 0;  // only read when groups > 1; must be >= heads * head_dim
  // Partial rotary (Megatron's rotary_percent): only the leading rotary_dim (even; 0 = head_dim)
  // dims of each vector rotate, with inv_freq[i] = theta^(-2i/rotary_dim); the rest pass through.
  int64_t rotary_dim = 0;
  // Pairs (2i, 2i+1) (Megatron's rotary_interleaved, Meta's layout) instead of (i, i + rotary_dim/2).
  bool interleaved = false;
};

// positions: undefined (position of sequence index i is i), i32 [s], i32 [b, s] (per batch element), or
// (rows functions) i32 [s*b], one per row in the rows' sequence-major order (a model's position ids).
// x: [s, b, heads, hn], contiguous. Rotates by +angle.
void rope_forward(const Tensor& x, const Tensor& positions, double theta = 10000.0);
// The gradient through rope_forward (the op is linear): rotates grad [s, b, heads, hn] by -angle in place.
void rope_backward(const Tensor& grad, const Tensor& positions, double theta = 10000.0);
// The same on the head vectors `heads` selects inside rows [s, b, row_width] (e.g. a fused QKV tensor).
void rope_forward_rows(const Tensor& rows, const RopeHeads& heads, const Tensor& positions, double theta = 10000.0);
void rope_backward_rows(const Tensor& grad_rows, const RopeHeads& heads, const Tensor& positions,
                        double theta = 10000.0);

namespace detail {
// Checks shared by the CPU and CUDA paths (rows [s, b, row_width], the head selection, positions, theta).
void check_rope_rows(const char* op, const Tensor& rows, const RopeHeads& heads, const Tensor& positions,
                     double theta);
}  // namespace detail

}  // namespace tessera::ops
