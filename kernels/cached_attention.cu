// Attention over a KV cache for generation (ops/cached_attention.h), one kernel a call. Keys and values
// of the tokens this call appends are read from the qkv rows themselves (the cache holds only the
// earlier ones while the kernel runs), and the block of each (token, sequence, query group)'s first
// head copies that token's key and value into the cache for the next call. Two kernels:
// - head_attention_kernel, for launches of few rows (a decode step of a small batch: fewer
//   (token, sequence, head) rows than about two blocks per SM) whose head rows split into 16-byte
//   vectors over a power of two <= 32 threads: one 512-thread block per row scans the row's whole
//   cache in chunks, loading every key and value vector of a chunk before using any (one memory round
//   trip a chunk), with an online softmax; the key groups and warps merge in fixed order. The idle
//   SMs meanwhile take the next kernel's blocks (programmatic dependent launch): its weights stream.
// - cached_attention_kernel, otherwise (prefill, large batches, other head sizes): one block per row,
//   the scores of its keys in shared memory, a block-wide softmax, then the weighted sum of the
//   values, with the vector reads above where the head row splits so, one thread per key otherwise.
// ALiBi adds -slope (i - j) to the score of query cache index i and key j. fp32 accumulation.
#include <algorithm>

#include "kernels/cached_attention.h"
#include "kernels/common.cuh"
#include "kernels/programmatic_launch.cuh"

namespace tessera::kernels {

namespace {

constexpr int kThreads = 128;
constexpr int kMaxHeadDim = 256;
constexpr size_t kSharedBytes = 48 * 1024;
constexpr int64_t kHeadKernelMaxRows = 2 * 132;  // about two blocks per SM of an H100 / H200
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

// Where key/value j of one (sequence b, query group g) lives while the kernel runs: the cache for
// j < past, the qkv row of new token j - past otherwise (its copy into the cache may not have happened).
template <typename T>
struct KeyRows {
  const T* k_cache;
  const T* v_cache;
  const T* new_key;  // new token 0's key row of (b, g) in qkv; its value row follows at + hn
  int64_t past, row, new_stride, hn;
  __device__ __forceinline__ const T* key(int64_t j) const {
    return j < past ? k_cache + j * row : new_key + (j - past) * new_stride;
  }
  __device__ __forceinline__ const T* value(int64_t j) const {
    return j < past ? v_cache + j * row : new_key + (j - past) * new_stride + hn;
  }
};

// New token s's key and value (from qkv) into its cache rows k_dst, v_dst, by the block's threads.
template <typename T>
__device__ __forceinline__ void append_new_row(const KeyRows<T>& kv, T* k_dst, T* v_dst, int64_t s) {
  const T* src = kv.new_key + s * kv.new_stride;
  for (int64_t e = threadIdx.x; e < kv.hn; e += blockDim.x) k_dst[e] = src[e], v_dst[e] = src[kv.hn + e];
}

// What block r = (s, b, h) of either kernel works on: token s of sequence b, head h.
template <typename T>
struct AttentionRow {
  int64_t h = 0, b = 0, s = 0, last = 0;  // last: token s's cache index; its keys are 0..last
  const T* q = nullptr;                    // token s's query row of head h, in qkv
  KeyRows<T> kv;
  T* k_new = nullptr;  // cache rows of token s's key and value
  T* v_new = nullptr;
};

// Block r's row (reads only what the previous grid does not write: the cached-token count).
template <typename T>
__device__ AttentionRow<T> attention_row_of_block(const T* qkv, const CachedAttentionArgs& a, int64_t hn, T* k_cache,
                                                  T* v_cache) {
  const int64_t ng = a.num_query_groups, per_group = a.num_heads / ng;
  const int64_t width = (a.num_heads + 2 * ng) * hn, row = ng * hn, r = blockIdx.x;
  AttentionRow<T> w;
  w.h = r % a.num_heads, w.b = (r / a.num_heads) % a.batch, w.s = r / (a.num_heads * a.batch);
  const int64_t g = w.h / per_group, past = cached_tokens(a);
  w.last = past + w.s;
  const T* group_qkv = qkv + g * (per_group + 2) * hn;  // token 0, sequence 0, query group g
  w.q = group_qkv + (w.s * a.batch + w.b) * width + (w.h % per_group) * hn;
  T* k_rows = k_cache + w.b * a.capacity * row + g * hn;
  T* v_rows = v_cache + w.b * a.capacity * row + g * hn;
  w.kv = KeyRows<T>{k_rows, v_rows, group_qkv + w.b * width + per_group * hn, past, row, a.batch * width, hn};
  w.k_new = k_rows + w.last * row;
  w.v_new = v_rows + w.last * row;
  return w;
}

// The block of each (token, sequence, query group)'s first head appends the token's key and value to
// the caches (they come from the previous grid's qkv: call it after waiting for that).
template <typename T>
__device__ void append_row_of_block(const AttentionRow<T>& w, const CachedAttentionArgs& a) {
  if (w.h % (a.num_heads / a.num_query_groups) == 0) append_new_row(w.kv, w.k_new, w.v_new, w.s);
}

// Block r's row, its key and value appended (after the previous grid).
template <typename T>
__device__ AttentionRow<T> attention_row(const T* qkv, const CachedAttentionArgs& a, int64_t hn, T* k_cache,
                                         T* v_cache) {
  const AttentionRow<T> w = attention_row_of_block(qkv, a, hn, k_cache, v_cache);
  append_row_of_block(w, a);
  return w;
}

// Block r = (s, b, h): token s of sequence b, head h, over keys 0..past + s (the general kernel).
template <typename T>
__global__ void cached_attention_kernel(const T* qkv, const uint8_t* key_mask, CachedAttentionArgs a, T* k_cache,
                                        T* v_cache, T* out) {
  extern __shared__ float shared[];
  wait_for_previous_grid();
  let_next_grid_launch();
  const int64_t hn = a.head_dim;
  const AttentionRow<T> w = attention_row(qkv, a, hn, k_cache, v_cache);
  const KeyRows<T>& kv = w.kv;
  const int64_t last = w.last, n = last + 1;
  float* q = shared;                       // [hn]
  float* sums = q + hn;                    // [sums_floats(hn)]
  float* scores = sums + sums_floats(hn);  // [capacity]
  for (int64_t e = threadIdx.x; e < hn; e += blockDim.x) q[e] = load_f(w.q + e) * a.softmax_scale;
  __syncthreads();
  const uint8_t* mask = key_mask ? key_mask + w.b * a.capacity : nullptr;
  const float slope = alibi_slope(a.alibi_first_head + w.h, a.alibi_heads);
  T* o = out + blockIdx.x * hn;
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
        k.load(kv.key(i) + sub * kVec);
#pragma unroll
        for (int e = 0; e < kVec; ++e) part += q[sub * kVec + e] * k.v[e];
      }
      for (int64_t off = lanes / 2; off > 0; off /= 2) part += __shfl_xor_sync(0xffffffffu, part, static_cast<int>(off));
      if (i < n && sub == 0) {
        const float score = live ? part - slope * static_cast<float>(last - i) : -INFINITY;
        scores[i] = score;
        local_max = fmaxf(local_max, score);
      }
    }
  } else {
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      float score = -INFINITY;
      if (!mask || mask[i]) score = dot_row(q, kv.key(i), hn) - slope * static_cast<float>(last - i);
      scores[i] = score;
      local_max = fmaxf(local_max, score);
    }
  }
  const float max_score = block_reduce<true>(local_max);
  if (max_score == -INFINITY) {  // no key to attend: a zero row
    for (int64_t e = threadIdx.x; e < hn; e += blockDim.x) store_f(o + e, 0.0f);
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
      v.load(kv.value(i) + sub * kVec);
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
      store_f(o + d, total / sum);
    }
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
        acc0 += scores[i] * load_f(kv.value(i) + d);
        acc1 += scores[i + groups] * load_f(kv.value(i + groups) + d);
      }
      if (i < n) acc0 += scores[i] * load_f(kv.value(i) + d);
    }
    __syncthreads();
    sums[threadIdx.x] = acc0 + acc1;
    __syncthreads();
    if (group == 0 && d < hn) {
      float total = 0.0f;
      for (int64_t k = 0; k < groups; ++k) total += sums[k * lanes_d + lane];
      store_f(o + d, total / sum);
    }
  }
}

// The whole-head kernel (few rows): keys go in chunks of (kHeadThreads / kLanes) * kHeadPasses, a group
// of kLanes threads per key (each a 16-byte slice of its row); one chunk holds 384 keys at head_dim 64.
constexpr int kHeadThreads = 512;
constexpr int kHeadPasses = 6;
constexpr int kHeadWarps = kHeadThreads / 32;

// (m, l, o[kN]) <- the merge of two softmax partials (max, sum of exp, unnormalised output).
template <int kN>
__device__ __forceinline__ void merge_partial(float& m, float& l, float* o, float m2, float l2, const float* o2) {
  const float mm = fmaxf(m, m2);
  const float a = m == -INFINITY ? 0.0f : __expf(m - mm), b = m2 == -INFINITY ? 0.0f : __expf(m2 - mm);
  l = l * a + l2 * b;
#pragma unroll
  for (int e = 0; e < kN; ++e) o[e] = o[e] * a + o2[e] * b;
  m = mm;
}

template <typename T, int kLanes>
__global__ void __launch_bounds__(kHeadThreads)
    head_attention_kernel(const T* qkv, const uint8_t* key_mask, CachedAttentionArgs a, T* k_cache, T* v_cache,
                          T* out) {
  constexpr int kVec = 16 / sizeof(T);
  constexpr int kGroups = kHeadThreads / kLanes;  // keys per pass
  constexpr int kHn = kLanes * kVec;
  __shared__ float warp_m[kHeadWarps], warp_l[kHeadWarps], warp_o[kHeadWarps][kHn];
  const AttentionRow<T> w = attention_row_of_block(qkv, a, kHn, k_cache, v_cache);
  const KeyRows<T>& kv = w.kv;
  const int64_t last = w.last, keys = last + 1;
  const int sub = threadIdx.x % kLanes, group = threadIdx.x / kLanes;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const uint8_t* mask = key_mask ? key_mask + w.b * a.capacity : nullptr;
  // A chunk's keys and values: cached ones (earlier steps wrote them; the mask is a host upload)
  // and new ones (this step's qkv, from the previous grid).
  uint4 kr[kHeadPasses], vr[kHeadPasses];
  bool live[kHeadPasses];
  const auto load_chunk = [&](int64_t c0, bool cached, bool fresh) {
#pragma unroll
    for (int p = 0; p < kHeadPasses; ++p) {
      const int64_t j = c0 + int64_t(p) * kGroups + group;
      if (cached) live[p] = j < keys && (!mask || mask[j]);
      if (live[p] && (j < kv.past ? cached : fresh)) {
        kr[p] = *reinterpret_cast<const uint4*>(kv.key(j) + sub * kVec);
        vr[p] = *reinterpret_cast<const uint4*>(kv.value(j) + sub * kVec);
      }
    }
  };
  // The first chunk's cached rows are requested before waiting for the previous grid.
  load_chunk(0, true, false);
  wait_for_previous_grid();
  let_next_grid_launch();  // at batch 1 this kernel takes few SMs: the next one's blocks take the rest
  append_row_of_block(w, a);
  load_chunk(0, false, true);
  float q[kVec];
  {
    Vec16<T> qv;
    qv.load(w.q + sub * kVec);
#pragma unroll
    for (int e = 0; e < kVec; ++e) q[e] = qv.v[e] * a.softmax_scale;
  }
  const float slope = alibi_slope(a.alibi_first_head + w.h, a.alibi_heads);
  float m_run = -INFINITY, l_run = 0.0f, acc[kVec];
#pragma unroll
  for (int e = 0; e < kVec; ++e) acc[e] = 0.0f;
  for (int64_t c0 = 0; c0 < keys; c0 += int64_t(kGroups) * kHeadPasses) {  // uniform over the block
    if (c0 > 0) load_chunk(c0, true, true);
    float score[kHeadPasses], chunk_max = -INFINITY;
#pragma unroll
    for (int p = 0; p < kHeadPasses; ++p) {
      float dot = 0.0f;
      if (live[p]) {
        const T* ke = reinterpret_cast<const T*>(&kr[p]);
#pragma unroll
        for (int e = 0; e < kVec; ++e) dot += q[e] * load_f(ke + e);
      }
#pragma unroll
      for (int off = kLanes / 2; off > 0; off /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, off);
      const int64_t j = c0 + int64_t(p) * kGroups + group;
      score[p] = live[p] ? dot - slope * static_cast<float>(last - j) : -INFINITY;
      chunk_max = fmaxf(chunk_max, score[p]);
    }
    const float m_new = fmaxf(m_run, chunk_max);
    if (m_new != -INFINITY) {  // the same on a group's lanes; no shuffle below
      const float rescale = m_run == -INFINITY ? 0.0f : __expf(m_run - m_new);
      l_run *= rescale;
#pragma unroll
      for (int e = 0; e < kVec; ++e) acc[e] *= rescale;
#pragma unroll
      for (int p = 0; p < kHeadPasses; ++p) {
        if (score[p] == -INFINITY) continue;
        const float w = __expf(score[p] - m_new);
        l_run += w;
        const T* ve = reinterpret_cast<const T*>(&vr[p]);
#pragma unroll
        for (int e = 0; e < kVec; ++e) acc[e] += w * load_f(ve + e);
      }
      m_run = m_new;
    }
  }
  // The groups of a warp (kLanes apart), then the warps in order.
#pragma unroll
  for (int off = kLanes; off < 32; off *= 2) {
    float o2[kVec];
#pragma unroll
    for (int e = 0; e < kVec; ++e) o2[e] = __shfl_xor_sync(0xffffffffu, acc[e], off);
    const float m2 = __shfl_xor_sync(0xffffffffu, m_run, off), l2 = __shfl_xor_sync(0xffffffffu, l_run, off);
    merge_partial<kVec>(m_run, l_run, acc, m2, l2, o2);
  }
  if (lane < kLanes) {
#pragma unroll
    for (int e = 0; e < kVec; ++e) warp_o[warp][sub * kVec + e] = acc[e];
    if (lane == 0) warp_m[warp] = m_run, warp_l[warp] = l_run;
  }
  __syncthreads();
  for (int d = threadIdx.x; d < kHn; d += blockDim.x) {
    float m = -INFINITY, l = 0.0f, o = 0.0f;
    for (int w = 0; w < kHeadWarps; ++w) merge_partial<1>(m, l, &o, warp_m[w], warp_l[w], &warp_o[w][d]);
    store_f(out + static_cast<int64_t>(blockIdx.x) * kHn + d, l > 0.0f ? o / l : 0.0f);  // no key to attend: a zero row
  }
}

template <typename T>
bool launch_head_attention(const void* qkv, const uint8_t* key_mask, const CachedAttentionArgs& a, void* k_cache,
                           void* v_cache, void* out, cudaStream_t s) {
  const unsigned rows = static_cast<unsigned>(a.tokens * a.batch * a.num_heads);
  const auto go = [&](auto kernel) {
    launch_kernel(a.programmatic, kernel, dim3(rows), dim3(kHeadThreads), 0, s, static_cast<const T*>(qkv), key_mask, a,
           static_cast<T*>(k_cache), static_cast<T*>(v_cache), static_cast<T*>(out));
    return true;
  };
  switch (lanes_per_key<T>(a.head_dim)) {
    case 2: return go(head_attention_kernel<T, 2>);
    case 4: return go(head_attention_kernel<T, 4>);
    case 8: return go(head_attention_kernel<T, 8>);
    case 16: return go(head_attention_kernel<T, 16>);
    case 32: return go(head_attention_kernel<T, 32>);
    default: return false;  // not a power-of-two vector split (or one vector): the general kernel
  }
}

}  // namespace

int64_t cached_attention_max_capacity(int64_t head_dim) {  // scores of the whole cache in shared memory
  return static_cast<int64_t>(kSharedBytes / sizeof(float)) - head_dim - sums_floats(head_dim);
}

void cached_attention_forward(DType t, const void* qkv, const uint8_t* key_mask, const CachedAttentionArgs& a,
                              void* k_cache, void* v_cache, void* out, cudaStream_t s) {
  if (a.tokens * a.batch == 0) return;
  TESSERA_CHECK(a.head_dim <= kMaxHeadDim, "cached attention kernel: head_dim ", a.head_dim, " > ", kMaxHeadDim);
  const int64_t rows = a.tokens * a.batch * a.num_heads;
  bool launched = false;
  if (rows < kHeadKernelMaxRows)
    TESSERA_DEVICE_FLOAT_SWITCH(t, T, launched = launch_head_attention<T>(qkv, key_mask, a, k_cache, v_cache, out, s));
  if (!launched) {
    const size_t shared = static_cast<size_t>(a.head_dim + sums_floats(a.head_dim) + a.capacity) * sizeof(float);
    TESSERA_DEVICE_FLOAT_SWITCH(
        t, T, launch_kernel(a.programmatic, cached_attention_kernel<T>, dim3(static_cast<unsigned>(rows)), dim3(kThreads),
                     shared, s, static_cast<const T*>(qkv), key_mask, a, static_cast<T*>(k_cache),
                     static_cast<T*>(v_cache), static_cast<T*>(out)));
  }
  TESSERA_KERNEL_LAUNCH_CHECK();
}

}  // namespace tessera::kernels
