// Core self-attention (after the QKV projection, before the output projection).
// qkv: [s, b, (na + 2 ng) hn] in Megatron's per-query-group layout: for each group g the row holds
//   [q of the na/ng heads of g (na/ng x hn), k_g (hn), v_g (hn)]; out: [s, b, na hn].
// probs (saved softmax, before dropout): [b, na, s, s]. Scores are scaled by 1/sqrt(hn); a causal
// mask, an optional key padding mask (u8 [b, s], 1 = attend) and optional document ids
// (params.document_ids: Megatron's reset_attention_mask) remove keys; ALiBi (params.alibi) adds its
// per-head linear bias to the scaled scores; a query row with no key left gets zero probabilities. Attention dropout follows ops/dropout.h on probs' flat index.
#pragma once
#include <cstdint>
#include <vector>

#include "tessera/core/rng.h"
#include "tessera/core/tensor.h"

namespace tessera::ops {

struct AttentionParams {
  int64_t num_heads = 1;
  int64_t num_query_groups = 1;
  int64_t head_dim = 1;
  bool causal = true;
  double dropout = 0.0;
  // Dropout counts probs' flat index in an attention of dropout_heads heads (0: num_heads) whose
  // head dropout_first_head is this call's head 0: a tensor-parallel rank's heads draw the masks the
  // unsplit attention would ([b, dropout_heads, s, s] index), so TP reproduces TP = 1.
  int64_t dropout_heads = 0;
  int64_t dropout_first_head = 0;
  // ALiBi (ops/alibi.h): adds -slope_h |i - j| to score (i, j); this call's head h is global head
  // alibi_first_head + h of alibi_heads (0: num_heads) heads, whose slopes it takes.
  bool alibi = false;
  int64_t alibi_heads = 0;
  int64_t alibi_first_head = 0;
  // Document masking (Megatron's reset_attention_mask, data/document_masks.h): i32 [b, s] on qkv's
  // device, or undefined (one document). Query i of sample b attends key j only when
  // document_ids[b, i] == document_ids[b, j], besides causality and the key padding mask. The
  // backward of the unfused attention needs none (its probs hold the mask); the fused one does.
  Tensor document_ids;
};

// Checks params.document_ids (when defined) is i32 [batch, seq] on `device`; op names the caller.
void check_document_ids(const char* op, const AttentionParams& params, int64_t batch, int64_t seq, Device device);

// The ALiBi slopes of params' heads (empty without ALiBi); checks the head range.
std::vector<double> attention_alibi_slopes(const AttentionParams& params);

void attention_forward(const Tensor& qkv, const Tensor& key_padding_mask, const AttentionParams& params,
                       const RandomStream& dropout_stream, const Tensor& out, const Tensor& probs);
// dqkv is overwritten.
void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& probs,
                        const AttentionParams& params, const RandomStream& dropout_stream, const Tensor& dqkv);

}  // namespace tessera::ops
