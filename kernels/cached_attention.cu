// Attention over a KV cache for generation (ops/cached_attention.h): one kernel appends the new
// tokens' keys and values to the caches, a second runs one block per (new token, sequence, head,
// split of the cache): the scores of the split's keys in shared memory, a block-wide softmax, then
// the weighted sum of the values. When a head row splits into 16-byte vectors over a power of two
// <= 32 threads (head_dim 64 or 128 in bf16/fp16, 32..128 in fp32) those threads read each key and
// value row together (a shuffle sums the dot product; the value sums reduce over the warp, then the
// warps); otherwise one thread reads a key row whole and the value pass spreads the head dimension
// across the threads. With one split the block writes the output; with
// several (decode of a small batch: too few (token, sequence, head) blocks to fill the GPU) each
// writes its (max, sum, unnormalised output) to a workspace and a third kernel combines the splits
// (flash-decoding). ALiBi adds -slope (i - j) to the score of query cache index i and key j. fp32
// accumulation.
#include <algorithm>

#include "kernels/cached_attention.h"
#include "kernels/common.cuh"

namespace tessera::kernels {

namespace {

constexpr int kThreads = 128;
constexpr int kMaxHeadDim = 256;
constexpr size_t kSharedBytes = 48 * 1024;
constexpr int64_t kTargetBlocks = 2 * 132;  // about two blocks per SM of an H100 / H200
constexpr int64_t kMinSplitKeys = 32;       // no split smaller than this many keys
constexpr int kWarps = kThreads / 32;

// Floats of the block's reduction area: the scalar path's per-thread sums, or the vector path's
// per-warp value rows.
__host__ __device__ constexpr int64_t sums_floats(int64_t hn) { return kThreads > kWarps * hn ? kThreads : kWarps * hn; }

// The vector path: each key row read as 16-byte vectors by `lanes_per_key` threads (a power of two
// <= 32, so a key's threads sit in one warp); 0 when the head does not split into such vectors.
template <typename T>
__host__ __device__ constexpr int64_t lanes_per_key(int64_t hn) {
  const int64_t vec = 16 / static_cast<int64_t>(sizeof(T));
  if (hn % vec != 0) return 0;
  const int64_t lanes = hn / vec;
  return (lanes <= 32 && (lanes & (lanes - 1)) == 0) ? lanes : 0;
}

template <typename T>
struct Vec16 {  // 16 bytes of T as fp32
  static constexpr int kN = 16 / sizeof(T);
  float v[kN];
  __device__ __forceinline__ void load(const T* p) {
    const uint4 raw = *reinterpret_cast<const uint4*>(p);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int k = 0; k < kN; ++k) v[k] = load_f(e + k);
  }
};

// Programmatic dependent launch (CachedAttentionArgs::programmatic): every kernel here waits for the
// previous grid before touching memory (a no-op under a plain launch).
__device__ __forceinline__ void wait_for_previous_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cudaGridDependencySynchronize();
#endif
}

template <typename Kernel, typename... Args>
void launch(bool programmatic, Kernel kernel, dim3 grid, dim3 block, size_t shared, cudaStream_t s, Args... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared;
  config.stream = s;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = programmatic ? 1 : 0;
  TESSERA_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, args...));
}

__device__ __forceinline__ int64_t cached_tokens(const CachedAttentionArgs& a) {
  return a.past_device ? static_cast<int64_t>(*a.past_device) : a.past;
}

// ALiBi slope of global head `head` of n (ops/alibi.cpp's formula); 0 when n == 0 (no ALiBi).
__device__ inline float alibi_slope(int64_t head, int64_t n) {
  if (n <= 0) return 0.0f;
  int64_t p = 1;
  while (p * 2 <= n) p *= 2;
  return head < p ? exp2f(-8.0f * static_cast<float>(head + 1) / static_cast<float>(p))
                  : exp2f(-8.0f * static_cast<float>(2 * (head - p) + 1) / static_cast<float>(2 * p));
}

template <typename T>
__global__ void append_kv_kernel(const T* qkv, CachedAttentionArgs a, T* k_cache, T* v_cache) {
  wait_for_previous_grid();
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

// q (shared, f32) . k (one cache row): four independent accumulators so the row's loads issue together.
template <typename T>
__device__ __forceinline__ float dot_row(const float* q, const T* k, int64_t hn) {
  float acc0 = 0.0f, acc1 = 0.0f, acc2 = 0.0f, acc3 = 0.0f;
  int64_t e = 0;
#pragma unroll 4
  for (; e + 4 <= hn; e += 4) {
    const float k0 = load_f(k + e), k1 = load_f(k + e + 1), k2 = load_f(k + e + 2), k3 = load_f(k + e + 3);
    acc0 += q[e] * k0;
    acc1 += q[e + 1] * k1;
    acc2 += q[e + 2] * k2;
    acc3 += q[e + 3] * k3;
  }
  for (; e < hn; ++e) acc0 += q[e] * load_f(k + e);
  return (acc0 + acc1) + (acc2 + acc3);
}

// Block (row r = (s, b, h), split c = blockIdx.y of gridDim.y). partial == nullptr: one split, the
// output row is written; otherwise partial[(r * splits + c) * (hn + 2) + ...] = (output sum [hn], max, sum).
template <typename T>
__global__ void cached_attention_kernel(const T* qkv, const uint8_t* key_mask, CachedAttentionArgs a,
                                        const T* k_cache, const T* v_cache, T* out, float* partial) {
  extern __shared__ float shared[];
  wait_for_previous_grid();
  const int64_t hn = a.head_dim, ng = a.num_query_groups, per_group = a.num_heads / ng;
  const int64_t width = (a.num_heads + 2 * ng) * hn, row = ng * hn;
  const int64_t r = blockIdx.x;
  const int64_t h = r % a.num_heads, b = (r / a.num_heads) % a.batch, s = r / (a.num_heads * a.batch);
  const int64_t g = h / per_group, last = cached_tokens(a) + s, keys = last + 1;
  const int64_t splits = gridDim.y, split = blockIdx.y;
  const int64_t chunk = (keys + splits - 1) / splits, j0 = split * chunk;
  const int64_t n = j0 < keys ? (keys - j0 < chunk ? keys - j0 : chunk) : 0;
  float* q = shared;                   // [hn]
  float* sums = q + hn;                // [kThreads]
  float* scores = sums + sums_floats(hn);  // [chunk]
  const T* q_src = qkv + (s * a.batch + b) * width + g * (per_group + 2) * hn + (h % per_group) * hn;
  for (int64_t e = threadIdx.x; e < hn; e += blockDim.x) q[e] = load_f(q_src + e) * a.softmax_scale;
  __syncthreads();
  const T* k_base = k_cache + b * a.capacity * row + g * hn + j0 * row;
  const T* v_base = v_cache + b * a.capacity * row + g * hn + j0 * row;
  const uint8_t* mask = key_mask ? key_mask + b * a.capacity + j0 : nullptr;
  const float slope = alibi_slope(a.alibi_first_head + h, a.alibi_heads);
  float local_max = -INFINITY;
  constexpr int64_t kVec = Vec16<T>::kN;
  const int64_t lanes = lanes_per_key<T>(hn);  // 0: the scalar path
  if (lanes > 0) {  // lanes threads per key, each a 16-byte slice of its row; keys_per_pass keys a pass
    const int64_t keys_per_pass = kThreads / lanes, sub = threadIdx.x % lanes;
    for (int64_t i0 = 0; i0 < n; i0 += keys_per_pass) {  // uniform over the block: every lane shuffles
      const int64_t i = i0 + threadIdx.x / lanes;
      const bool live = i < n && (!mask || mask[i]);
      float part = 0.0f;
      if (live) {
        Vec16<T> k;
        k.load(k_base + i * row + sub * kVec);
#pragma unroll
        for (int e = 0; e < kVec; ++e) part += q[sub * kVec + e] * k.v[e];
      }
      for (int64_t off = lanes / 2; off > 0; off /= 2) part += __shfl_xor_sync(0xffffffffu, part, static_cast<int>(off));
      if (i < n && sub == 0) {
        const float score = live ? part - slope * static_cast<float>(last - j0 - i) : -INFINITY;
        scores[i] = score;
        local_max = fmaxf(local_max, score);
      }
    }
  } else {
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      float score = -INFINITY;
      if (!mask || mask[i]) score = dot_row(q, k_base + i * row, hn) - slope * static_cast<float>(last - j0 - i);
      scores[i] = score;
      local_max = fmaxf(local_max, score);
    }
  }
  const float max_score = block_reduce<true>(local_max);
  T* o = out + r * hn;
  float* part = partial ? partial + (r * splits + split) * (hn + 2) : nullptr;
  if (max_score == -INFINITY) {  // no key to attend in this split: a zero row (or an empty partial)
    for (int64_t e = threadIdx.x; e < hn; e += blockDim.x) {
      if (part) part[e] = 0.0f;
      else store_f(o + e, 0.0f);
    }
    if (part && threadIdx.x == 0) part[hn] = -INFINITY, part[hn + 1] = 0.0f;
    return;
  }
  float local_sum = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float p = scores[i] == -INFINITY ? 0.0f : __expf(scores[i] - max_score);
    scores[i] = p;
    local_sum += p;
  }
  const float sum = block_reduce<false>(local_sum);  // its __syncthreads also publishes scores
  if (lanes > 0) {  // values: thread (key group, slice) sums its slice over keys group, group + groups, ...
    const int64_t groups = kThreads / lanes, group = threadIdx.x / lanes, sub = threadIdx.x % lanes;
    float acc[kVec];
#pragma unroll
    for (int e = 0; e < kVec; ++e) acc[e] = 0.0f;
    for (int64_t i = group; i < n; i += groups) {
      const float p = scores[i];
      if (p == 0.0f) continue;
      Vec16<T> v;
      v.load(v_base + i * row + sub * kVec);
#pragma unroll
      for (int e = 0; e < kVec; ++e) acc[e] += p * v.v[e];
    }
    // The key groups of a warp (lanes apart), then the warps through shared memory.
    for (int64_t off = lanes; off < 32; off *= 2)
#pragma unroll
      for (int e = 0; e < kVec; ++e) acc[e] += __shfl_xor_sync(0xffffffffu, acc[e], static_cast<int>(off));
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane < lanes)
#pragma unroll
      for (int e = 0; e < kVec; ++e) sums[warp * hn + sub * kVec + e] = acc[e];
    __syncthreads();
    for (int64_t d = threadIdx.x; d < hn; d += blockDim.x) {
      float total = 0.0f;
      for (int w = 0; w < kWarps; ++w) total += sums[w * hn + d];
      if (part) part[d] = total;
      else store_f(o + d, total / sum);
    }
    if (part && threadIdx.x == 0) part[hn] = max_score, part[hn + 1] = sum;
    return;
  }
  // Values: thread (group, d) sums keys group, group + groups, ... for dimensions d, d + hn', ...
  const int64_t lanes_d = hn < blockDim.x ? hn : blockDim.x;
  const int64_t groups = blockDim.x / lanes_d;
  const int64_t group = threadIdx.x / lanes_d, lane = threadIdx.x % lanes_d;
  for (int64_t d0 = 0; d0 < hn; d0 += lanes_d) {
    const int64_t d = d0 + lane;
    float acc0 = 0.0f, acc1 = 0.0f;
    if (group < groups && d < hn) {
      int64_t i = group;
      for (; i + groups < n; i += 2 * groups) {
        acc0 += scores[i] * load_f(v_base + i * row + d);
        acc1 += scores[i + groups] * load_f(v_base + (i + groups) * row + d);
      }
      if (i < n) acc0 += scores[i] * load_f(v_base + i * row + d);
    }
    __syncthreads();
    sums[threadIdx.x] = acc0 + acc1;
    __syncthreads();
    if (group == 0 && d < hn) {
      float total = 0.0f;
      for (int64_t k = 0; k < groups; ++k) total += sums[k * lanes_d + lane];
      if (part) part[d] = total;
      else store_f(o + d, total / sum);
    }
  }
  if (part && threadIdx.x == 0) part[hn] = max_score, part[hn + 1] = sum;
}

// One block per row r: the splits' partial results into the output row.
template <typename T>
__global__ void combine_splits_kernel(const float* partial, int64_t hn, int64_t splits, T* out) {
  wait_for_previous_grid();
  const int64_t r = blockIdx.x;
  const float* p = partial + r * splits * (hn + 2);
  float m = -INFINITY;
  for (int64_t c = 0; c < splits; ++c) m = fmaxf(m, p[c * (hn + 2) + hn]);
  T* o = out + r * hn;
  if (m == -INFINITY) {
    for (int64_t e = threadIdx.x; e < hn; e += blockDim.x) store_f(o + e, 0.0f);
    return;
  }
  float l = 0.0f;
  for (int64_t c = 0; c < splits; ++c) {
    const float mc = p[c * (hn + 2) + hn];
    if (mc != -INFINITY) l += p[c * (hn + 2) + hn + 1] * __expf(mc - m);
  }
  for (int64_t e = threadIdx.x; e < hn; e += blockDim.x) {
    float acc = 0.0f;
    for (int64_t c = 0; c < splits; ++c) {
      const float mc = p[c * (hn + 2) + hn];
      if (mc != -INFINITY) acc += p[c * (hn + 2) + e] * __expf(mc - m);
    }
    store_f(o + e, acc / l);
  }
}

}  // namespace

int64_t cached_attention_max_capacity(int64_t head_dim) {  // scores of the whole cache in shared memory
  return static_cast<int64_t>(kSharedBytes / sizeof(float)) - head_dim - sums_floats(head_dim);
}

int64_t cached_attention_splits(const CachedAttentionArgs& a) {
  const int64_t rows = a.tokens * a.batch * a.num_heads;
  if (rows <= 0 || rows >= kTargetBlocks || a.capacity < 2 * kMinSplitKeys) return 1;
  int64_t splits = std::min((kTargetBlocks + rows - 1) / rows, a.capacity / kMinSplitKeys);
  const size_t per_split = static_cast<size_t>(rows) * static_cast<size_t>(a.head_dim + 2) * sizeof(float);
  splits = std::min<int64_t>(splits, static_cast<int64_t>(a.workspace_bytes / per_split));
  return std::max<int64_t>(splits, 1);
}

void cached_attention_forward(DType t, const void* qkv, const uint8_t* key_mask, const CachedAttentionArgs& a,
                              void* k_cache, void* v_cache, void* out, cudaStream_t s) {
  if (a.tokens * a.batch == 0) return;
  TESSERA_CHECK(a.head_dim <= kMaxHeadDim, "cached attention kernel: head_dim ", a.head_dim, " > ", kMaxHeadDim);
  const int64_t appended = a.tokens * a.batch * a.num_query_groups * a.head_dim;
  const unsigned append_blocks = static_cast<unsigned>(std::min<int64_t>((appended + 255) / 256, 132 * 32));
  // The split count depends on the capacity, not on the cached tokens: the same launches for every
  // decode step (graph replays); each block takes ceil(keys / splits) keys of the step.
  const int64_t splits = a.workspace ? cached_attention_splits(a) : 1;
  const int64_t chunk = (a.capacity + splits - 1) / splits;
  const size_t shared = static_cast<size_t>(a.head_dim + sums_floats(a.head_dim) + chunk) * sizeof(float);
  const unsigned rows = static_cast<unsigned>(a.tokens * a.batch * a.num_heads);
  float* partial = splits > 1 ? static_cast<float*>(a.workspace) : nullptr;
  const bool pdl = a.programmatic;
  TESSERA_DEVICE_FLOAT_SWITCH(
      t, T, launch(pdl, append_kv_kernel<T>, dim3(append_blocks), dim3(256), 0, s, static_cast<const T*>(qkv), a,
                   static_cast<T*>(k_cache), static_cast<T*>(v_cache));
      launch(pdl, cached_attention_kernel<T>, dim3(rows, static_cast<unsigned>(splits)), dim3(kThreads), shared, s,
             static_cast<const T*>(qkv), key_mask, a, static_cast<const T*>(k_cache), static_cast<const T*>(v_cache),
             static_cast<T*>(out), partial);
      if (splits > 1) launch(pdl, combine_splits_kernel<T>, dim3(rows), dim3(64), 0, s, static_cast<const float*>(partial),
                             a.head_dim, splits, static_cast<T*>(out)));
  TESSERA_KERNEL_LAUNCH_CHECK();
}

}  // namespace tessera::kernels
