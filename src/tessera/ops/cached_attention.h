// Causal self-attention over a KV cache (generation): the new tokens' keys and values are written
// into the cache, then each new query attends to every cached key up to its own index.
// qkv [t, b, (na + 2 ng) hn] in Megatron's per-query-group layout (ops/attention.h) for t new tokens
// that occupy cache indices [past, past + t); k_cache, v_cache [b, capacity, ng hn] of qkv's dtype;
// key_mask u8 [b, capacity] (1 = attend: a real token; 0: left padding) or undefined (all keys);
// out [t, b, na hn]. Query i attends keys j <= past + i with key_mask[b, j] = 1, scores scaled by
// 1/sqrt(hn), plus ALiBi's -slope_h (i - j) for query cache index i (params.alibi, the slopes of
// params' global heads as ops/attention.h); a query with no key left gets a zero row. CPU: f32/f64
// (bf16/f16 through f32); CUDA: f32/bf16/f16 (kernels/cached_attention.cu; head_dim <= 256, a cache
// of up to ~12k tokens).
#pragma once
#include <cstdint>

#include "tessera/core/tensor.h"
#include "tessera/ops/attention.h"

namespace tessera::ops {

// past_device (CUDA only, optional): i32 [1] on the device holding the number of cached tokens, read by
// the kernel instead of `past` (which then bounds it), so a captured CUDA graph serves every step.
void cached_attention_forward(const Tensor& qkv, const Tensor& key_mask, const AttentionParams& params,
                              const Tensor& k_cache, const Tensor& v_cache, int64_t past, const Tensor& out,
                              const Tensor& past_device = Tensor());

#ifdef TESSERA_HAVE_CUDA
namespace cuda {  // the CUDA backend (ops/cuda/cached_attention_cuda.cpp), reached through the dispatcher
void cached_attention_forward(const Tensor& qkv, const Tensor& key_mask, const AttentionParams& params,
                              const Tensor& k_cache, const Tensor& v_cache, int64_t past, const Tensor& out,
                              const Tensor& past_device);
}  // namespace cuda
#endif

}  // namespace tessera::ops
