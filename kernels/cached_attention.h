// Launch declarations of the KV-cache attention kernels (cached_attention.cu), for generation.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "tessera/core/dtype.h"

namespace tessera::kernels {

struct CachedAttentionArgs {
  int64_t tokens = 0, batch = 0, num_heads = 0, num_query_groups = 0, head_dim = 0, capacity = 0, past = 0;
  float softmax_scale = 1.0f;
  // When set: the number of cached tokens is read from this device i32 instead of `past` (a CUDA
  // graph replays one launch for every decode step); `past` is then only an upper bound.
  const int32_t* past_device = nullptr;
  // ALiBi: this call's head h is global head alibi_first_head + h of alibi_heads (0: no ALiBi).
  int64_t alibi_heads = 0, alibi_first_head = 0;
  // Launch the kernels with programmatic dependent launch (each waits for the previous grid first):
  // a decode step's launches overlap the previous kernel's tail.
  bool programmatic = false;
};

// The largest cache (in tokens) the kernel takes for a head_dim: its scores live in shared memory.
int64_t cached_attention_max_capacity(int64_t head_dim);
// qkv [t, b, (na + 2 ng) hn]; k_cache, v_cache [b, capacity, ng hn]; key_mask u8 [b, capacity] or null;
// out [t, b, na hn]. Attends (ops/cached_attention.h) and writes the new keys/values into the caches,
// in one kernel.
void cached_attention_forward(DType t, const void* qkv, const uint8_t* key_mask, const CachedAttentionArgs& a,
                              void* k_cache, void* v_cache, void* out, cudaStream_t s);

}  // namespace tessera::kernels
