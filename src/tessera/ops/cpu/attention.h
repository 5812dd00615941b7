// CPU reference of core self-attention on raw arrays (float, double): per (batch, head) GEMMs through
// CBLAS straight on the strided Megatron per-query-group QKV layout (see ops/attention.h).
#pragma once
#include <cstdint>
#include <vector>

#include "tessera/core/rng.h"

namespace tessera::ops::cpu {

struct AttentionDims {
  int64_t seq = 0;               // s
  int64_t batch = 0;             // b
  int64_t num_heads = 0;         // na
  int64_t num_query_groups = 0;  // ng, divides na
  int64_t head_dim = 0;          // hn
  // Dropout index space: probs of dropout_heads heads (>= num_heads), this call's heads starting at
  // dropout_first_head (a tensor-parallel slice of the unsplit attention; see ops/attention.h).
  int64_t dropout_heads = 0;       // 0: num_heads
  int64_t dropout_first_head = 0;
  // ALiBi: one slope per head of this call (empty: no bias); score (i, j) += -slope |i - j|.
  std::vector<double> alibi_slopes;
};

// The ALiBi bias of score (i, j) for a head of slope `slope` (0 without ALiBi).
inline double alibi_bias(double slope, int64_t i, int64_t j) { return -slope * static_cast<double>(i > j ? i - j : j - i); }

// Whether query i of sample bi may attend key j: causality, the key padding mask (u8 [b, s], 1 =
// attend, or null) and the document ids (i32 [b, s] or null: the same document only).
inline bool attends(int64_t seq, int64_t bi, int64_t i, int64_t j, bool causal, const uint8_t* key_padding_mask,
                    const int32_t* document_ids) {
  return (!causal || j <= i) && (!key_padding_mask || key_padding_mask[bi * seq + j]) &&
         (!document_ids || document_ids[bi * seq + i] == document_ids[bi * seq + j]);
}

// qkv [s, b, (na + 2 ng) hn]; key_padding_mask u8 [b, s] (1 = attend) or null; document_ids i32 [b, s]
// or null; out [s, b, na hn]; probs [b, na, s, s] (softmax before dropout, 0 on masked keys).
// Attention-probability dropout keeps element i of probs iff
// dropout_stream.uniform_of_quarter(i) >= dropout.
template <typename T>
void attention_forward(const T* qkv, const uint8_t* key_padding_mask, const int32_t* document_ids,
                       const AttentionDims& dims, bool causal, double dropout, const RandomStream& dropout_stream,
                       T* out, T* probs);
// dqkv [s, b, (na + 2 ng) hn] is overwritten (the masks are in probs' zeros).
template <typename T>
void attention_backward(const T* dout, const T* qkv, const T* probs, const AttentionDims& dims, double dropout,
                        const RandomStream& dropout_stream, T* dqkv);

}  // namespace tessera::ops::cpu
