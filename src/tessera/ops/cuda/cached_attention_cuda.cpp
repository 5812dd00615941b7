// CUDA host side of attention over a KV cache (kernels/cached_attention.cu): the kernel's own limits,
// then the launch on CudaContext's stream. The dispatcher (ops/cached_attention.cpp) checked shapes.
#include <cmath>

#include "kernels/cached_attention.h"
#include "tessera/ops/cached_attention.h"
#include "tessera/ops/cuda/cuda_context.h"
#include "tessera/ops/decode_linear.h"

namespace tessera::ops::cuda {

void cached_attention_forward(const Tensor& qkv, const Tensor& key_mask, const AttentionParams& params,
                              const Tensor& k_cache, const Tensor& v_cache, int64_t past, const Tensor& out,
                              const Tensor& past_device) {
  kernels::CachedAttentionArgs a;
  a.tokens = qkv.dim(0);
  a.batch = qkv.dim(1);
  a.num_heads = params.num_heads;
  a.num_query_groups = params.num_query_groups;
  a.head_dim = params.head_dim;
  a.capacity = k_cache.dim(1);
  a.past = past;
  a.softmax_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(params.head_dim)));
  if (past_device.defined() && past_device.data()) a.past_device = static_cast<const int32_t*>(past_device.data());
  if (params.alibi) {
    (void)attention_alibi_slopes(params);  // checks the head range
    a.alibi_heads = params.alibi_heads > 0 ? params.alibi_heads : params.num_heads;
    a.alibi_first_head = params.alibi_first_head;
  }
  a.programmatic = decode_switches().programmatic_launch;
  TESSERA_CHECK(a.head_dim <= 256 && a.capacity <= kernels::cached_attention_max_capacity(a.head_dim),
                "cached_attention_forward: the CUDA kernel takes head_dim <= 256 and at most ",
                kernels::cached_attention_max_capacity(a.head_dim), " cached tokens, got head_dim ", a.head_dim,
                " and a cache of ", a.capacity, " tokens");
  kernels::cached_attention_forward(qkv.dtype(), qkv.data(),
                                    key_mask.defined() ? static_cast<const uint8_t*>(key_mask.data()) : nullptr, a,
                                    k_cache.data(), v_cache.data(), out.data(), CudaContext::get().stream());
}

}  // namespace tessera::ops::cuda
