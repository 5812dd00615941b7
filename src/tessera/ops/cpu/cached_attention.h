// CPU reference of attention over a KV cache (ops/cached_attention.h) on raw arrays (float, double).
#pragma once
#include <cstdint>
#include <vector>

namespace tessera::ops::cpu {

struct CachedAttentionDims {
  int64_t tokens = 0;            // t: new tokens per sequence
  int64_t batch = 0;             // b
  int64_t num_heads = 0;         // na
  int64_t num_query_groups = 0;  // ng
  int64_t head_dim = 0;          // hn
  int64_t capacity = 0;          // cache length
  int64_t past = 0;              // cached tokens before the new ones
  // ALiBi: one slope per head of this call (empty: no bias); score of query at cache index i and
  // key j (<= i) += -slope (i - j), the training forward's index distance (ops/cpu/attention.h).
  std::vector<double> alibi_slopes;
};

template <typename T>
void cached_attention_forward(const T* qkv, const uint8_t* key_mask, const CachedAttentionDims& dims, T* k_cache,
                              T* v_cache, T* out);

}  // namespace tessera::ops::cpu
