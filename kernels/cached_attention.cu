// Attention over a KV cache for generation (ops/cached_attention.h): one kernel appends the new
// tokens' keys and values to the caches, a second runs one block per (new token, sequence, head):
// scores of every cached key in shared memory, a block-wide softmax, then the weighted sum of the
// values with the head dimension across the threads (coalesced cache reads). fp32 accumulation.
#include <algorithm>

#include "kernels/cached_attention.h"
#include "kernels/common.cuh"

namespace tessera::kernels {

namespace {

constexpr int kThreads = 128;
constexpr int kMaxHeadDim = 256;
constexpr size_t kSharedBytes = 48 * 1024;

__device__ __forceinline__ int64_t cached_tokens(const CachedAttentionArgs& a) {
  return a.past_device ? static_cast<int64_t>(*a.past_device) : a.past;
}

template <typename T>
__global__ void append_kv_kernel(const T* qkv, CachedAttentionArgs a, T* k_cache, T* v_cache) {
  const int64_t past = cached_tokens(a);
  const int64_t hn = a.head_dim, ng = a.num_query_groups, per_group = a.num_heads / ng;
  const int64_t width = (a.num_heads + 2 * ng) * hn;
  const int64_t total = a.tokens * a.batch * ng * hn;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t e = i % hn, g = (i / hn) % ng, b = (i / (hn * ng)) % a.batch, s = i / (hn * ng * a.batch);
    const T* k = qkv + (s * a.batch + b) * width + g * (per_group + 2) * hn + per_group * hn;
    const int64_t slot = (b * a.capacity + past + s) * ng * hn + g * hn + e;
    k_cache[slot] = k[e];
    v_cache[slot] = k[hn + e];
  }
}

template <typename T>
__global__ void cached_attention_kernel(const T* qkv, const uint8_t* key_mask, CachedAttentionArgs a,
                                        const T* k_cache, const T* v_cache, T* out) {
  extern __shared__ float shared[];
  const int64_t hn = a.head_dim, ng = a.num_query_groups, per_group = a.num_heads / ng;
  const int64_t width = (a.num_heads + 2 * ng) * hn, row = ng * hn;
  const int64_t h = blockIdx.x % a.num_heads, b = (blockIdx.x / a.num_heads) % a.batch,
                s = blockIdx.x / (a.num_heads * a.batch);
  const int64_t g = h / per_group, keys = cached_tokens(a) + s + 1;
  float* q = shared;               // [hn]
  float* partial = q + hn;         // [kThreads]
  float* scores = partial + kThreads;  // [keys]
  const T* q_src = qkv + (s * a.batch + b) * width + g * (per_group + 2) * hn + (h % per_group) * hn;
  for (int64_t e = threadIdx.x; e < hn; e += blockDim.x) q[e] = load_f(q_src + e) * a.softmax_scale;
  __syncthreads();
  const T* k_base = k_cache + b * a.capacity * row + g * hn;
  const T* v_base = v_cache + b * a.capacity * row + g * hn;
  const uint8_t* mask = key_mask ? key_mask + b * a.capacity : nullptr;
  float local_max = -INFINITY;
  for (int64_t j = threadIdx.x; j < keys; j += blockDim.x) {
    float score = -INFINITY;
    if (!mask || mask[j]) {
      const T* k = k_base + j * row;
      score = 0.0f;
      for (int64_t e = 0; e < hn; ++e) score += q[e] * load_f(k + e);
    }
    scores[j] = score;
    local_max = fmaxf(local_max, score);
  }
  const float max_score = block_reduce<true>(local_max);
  T* o = out + (s * a.batch + b) * a.num_heads * hn + h * hn;
  if (max_score == -INFINITY) {  // no key to attend: a zero row
    for (int64_t e = threadIdx.x; e < hn; e += blockDim.x) store_f(o + e, 0.0f);
    return;
  }
  float local_sum = 0.0f;
  for (int64_t j = threadIdx.x; j < keys; j += blockDim.x) {
    const float p = scores[j] == -INFINITY ? 0.0f : __expf(scores[j] - max_score);
    scores[j] = p;
    local_sum += p;
  }
  const float sum = block_reduce<false>(local_sum);  // its __syncthreads also publishes scores
  // Values: thread (group, d) sums keys group, group + groups, ... for dimensions d, d + hn', ...
  const int64_t lanes = hn < blockDim.x ? hn : blockDim.x;
  const int64_t groups = blockDim.x / lanes;
  const int64_t group = threadIdx.x / lanes, lane = threadIdx.x % lanes;
  for (int64_t d0 = 0; d0 < hn; d0 += lanes) {
    const int64_t d = d0 + lane;
    float acc = 0.0f;
    if (group < groups && d < hn)
      for (int64_t j = group; j < keys; j += groups) acc += scores[j] * load_f(v_base + j * row + d);
    __syncthreads();
    partial[threadIdx.x] = acc;
    __syncthreads();
    if (group == 0 && d < hn) {
      float total = 0.0f;
      for (int64_t k = 0; k < groups; ++k) total += partial[k * lanes + lane];
      store_f(o + d, total / sum);
    }
  }
}

}  // namespace

int64_t cached_attention_max_capacity(int64_t head_dim) {  // scores of the whole cache in shared memory
  return static_cast<int64_t>(kSharedBytes / sizeof(float)) - head_dim - kThreads;
}

void cached_attention_forward(DType t, const void* qkv, const uint8_t* key_mask, const CachedAttentionArgs& a,
                              void* k_cache, void* v_cache, void* out, cudaStream_t s) {
  if (a.tokens * a.batch == 0) return;
  TESSERA_CHECK(a.head_dim <= kMaxHeadDim, "cached attention kernel: head_dim ", a.head_dim, " > ", kMaxHeadDim);
  const int64_t appended = a.tokens * a.batch * a.num_query_groups * a.head_dim;
  const unsigned append_blocks = static_cast<unsigned>(std::min<int64_t>((appended + 255) / 256, 132 * 32));
  // Scores for up to the whole cache: the same launch for every step (graph replays).
  const size_t shared = static_cast<size_t>(a.head_dim + kThreads + a.capacity) * sizeof(float);
  const unsigned blocks = static_cast<unsigned>(a.tokens * a.batch * a.num_heads);
  TESSERA_DEVICE_FLOAT_SWITCH(
      t, T, append_kv_kernel<T><<<append_blocks, 256, 0, s>>>(static_cast<const T*>(qkv), a, static_cast<T*>(k_cache),
                                                              static_cast<T*>(v_cache));
      TESSERA_KERNEL_LAUNCH_CHECK();
      cached_attention_kernel<T><<<blocks, kThreads, shared, s>>>(static_cast<const T*>(qkv), key_mask, a,
                                                                  static_cast<const T*>(k_cache),
                                                                  static_cast<const T*>(v_cache), static_cast<T*>(out)));
  TESSERA_KERNEL_LAUNCH_CHECK();
}

}  // namespace tessera::kernels
