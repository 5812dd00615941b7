// Attention over a KV cache: checks shapes, dtypes and the cache window, then runs the CPU reference
// (cpu/cached_attention.h) or the CUDA kernel.
#include "tessera/ops/cached_attention.h"

#include "tessera/ops/cpu/cached_attention.h"
#include "tessera/ops/cuda_dispatch.h"
#include "tessera/ops/half_compute.h"
#include "tessera/ops/op_checks.h"

namespace tessera::ops {

namespace {
cpu::CachedAttentionDims cached_dims(const char* op, const Tensor& qkv, const Tensor& key_mask,
                                     const AttentionParams& p, const Tensor& k_cache, const Tensor& v_cache,
                                     int64_t past, const Tensor& out) {
  TESSERA_CHECK(p.num_heads > 0 && p.num_query_groups > 0 && p.head_dim > 0 && p.num_heads % p.num_query_groups == 0,
                op, ": num_heads ", p.num_heads, " must be a positive multiple of num_query_groups ",
                p.num_query_groups, " and head_dim ", p.head_dim, " positive");
  TESSERA_CHECK(!p.document_ids.defined(), op, ": KV-cache attention has no document masks (params.document_ids)");
  const int64_t width = (p.num_heads + 2 * p.num_query_groups) * p.head_dim;
  TESSERA_CHECK(qkv.ndim() == 3 && qkv.dim(2) == width, op, ": qkv must be [t, b, ", width, "], got ",
                qkv.describe());
  cpu::CachedAttentionDims d;
  d.tokens = qkv.dim(0);
  d.batch = qkv.dim(1);
  d.num_heads = p.num_heads;
  d.num_query_groups = p.num_query_groups;
  d.head_dim = p.head_dim;
  TESSERA_CHECK(k_cache.ndim() == 3 && k_cache.dim(0) == d.batch && k_cache.dim(2) == p.num_query_groups * p.head_dim,
                op, ": k_cache must be [", d.batch, ", capacity, ", p.num_query_groups * p.head_dim, "], got ",
                k_cache.describe());
  d.capacity = k_cache.dim(1);
  d.past = past;
  d.alibi_slopes = attention_alibi_slopes(p);  // checks the head range
  TESSERA_CHECK(past >= 0 && past + d.tokens <= d.capacity, op, ": new tokens [", past, ", ", past + d.tokens,
                ") outside the cache's ", d.capacity, " slots");
  detail::require_same_dtypes(op, qkv, "qkv", {{&k_cache, "k_cache"}, {&v_cache, "v_cache"}, {&out, "out"}});
  detail::require_same_shape(op, k_cache, "k_cache", v_cache, "v_cache");
  expect_tensor(out, qkv.dtype(), {d.tokens, d.batch, p.num_heads * p.head_dim}, "cached_attention_forward: out");
  if (key_mask.defined()) expect_tensor(key_mask, DType::u8, {d.batch, d.capacity}, "cached_attention_forward: key_mask");
  return d;
}
}  // namespace

void cached_attention_forward(const Tensor& qkv, const Tensor& key_mask, const AttentionParams& params,
                              const Tensor& k_cache, const Tensor& v_cache, int64_t past, const Tensor& out,
                              const Tensor& past_device) {
  const char* op = "cached_attention_forward";
  const cpu::CachedAttentionDims d = cached_dims(op, qkv, key_mask, params, k_cache, v_cache, past, out);
  if (past_device.defined() && past_device.data()) expect_tensor(past_device, DType::i32, {1}, "cached_attention_forward: past_device");
  if (detail::runs_on_cuda(op, {&qkv, &key_mask, &k_cache, &v_cache, &out, &past_device}))
    return TESSERA_CUDA_OP(cached_attention_forward(qkv, key_mask, params, k_cache, v_cache, past, out, past_device));
  TESSERA_CHECK(!past_device.defined() || !past_device.data(), op, ": past_device is for the CUDA kernel only");
  if (detail::is_half(qkv.dtype())) {  // bf16 / f16 on the CPU: f32 compute
    detail::compute_in_f32({qkv, key_mask, k_cache, v_cache, out}, {false, false, true, true, true},
                           [&](const std::vector<Tensor>& t) {
                             cached_attention_forward(t[0], t[1], params, t[2], t[3], past, t[4]);
                           });
    return;
  }
  const uint8_t* mask = key_mask.defined() ? key_mask.data_as<uint8_t>() : nullptr;
  detail::visit_f32_or_f64(op, qkv, "qkv", [&](auto tag) {
    using T = decltype(tag);
    cpu::cached_attention_forward<T>(qkv.data_as<T>(), mask, d, k_cache.data_as<T>(), v_cache.data_as<T>(),
                                     out.data_as<T>());
  });
}

}  // namespace tessera::ops
