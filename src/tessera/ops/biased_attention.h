// Attention with an additive score bias and separate query / key-value sequences (T5's attention:
// self-attention with a relative position bias, and cross-attention to the encoder's output).
// Rows are tokens, sequence-major ([s, b] flattened), as everywhere inside the transformer:
//   q [sq*b, nh*hn], k and v [sk*b, nh*hn], out [sq*b, nh*hn]; head h holds columns [h hn, (h+1) hn).
// score(b, h, i, j) = q_i . k_j + bias[h, i, j] (no 1/sqrt(hn) scaling: T5 folds it into the
// initialisation); keys are removed by the causal mask (j > i; queries and keys aligned at the
// start) and the key padding mask (u8 [b, sk], 1 = attend); a query with no key left gets zero
// probabilities. probs [b, nh, sq, sk] is the softmax before dropout; attention dropout follows
// ops/dropout.h on probs' flat index in an attention of dropout_heads heads whose head
// dropout_first_head is this call's head 0 (so a tensor-parallel rank draws the unsplit masks).
#pragma once
#include <cstdint>

#include "tessera/core/rng.h"
#include "tessera/core/tensor.h"

namespace tessera::ops {

struct BiasedAttentionParams {
  int64_t batch = 1;
  int64_t num_heads = 1;
  int64_t head_dim = 1;
  bool causal = false;
  double dropout = 0.0;
  int64_t dropout_heads = 0;  // 0: num_heads
  int64_t dropout_first_head = 0;
};

// bias: [nh, sq, sk] or undefined (no bias); key_padding_mask: u8 [b, sk] or undefined.
void biased_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias,
                              const Tensor& key_padding_mask, const BiasedAttentionParams& params,
                              const RandomStream& dropout_stream, const Tensor& out, const Tensor& probs);
// dq, dk, dv are overwritten; dbias (optional, [nh, sq, sk]) is accumulated: += the score
// gradients summed over the batch.
void biased_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& probs, const BiasedAttentionParams& params,
                               const RandomStream& dropout_stream, const Tensor& dq, const Tensor& dk,
                               const Tensor& dv, const Tensor& dbias);

}  // namespace tessera::ops
