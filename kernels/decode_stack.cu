// The persistent decode stack (decode_stack.h): all GPT blocks of a decode step in one kernel, one
// block per SM, each block two producer warps and 14 consumer warps (16 warps: 128 registers a thread).
// An experiment (sessions 26-27, docs/decode-gpu.md): at batch 1 it measured slower than the
// five-kernel fused layer; at batch 2 and 4 faster.
//
// Work: every layer is five ops, QKV (LayerNorm 1 prologue), attention, proj (+ the layer input),
// fc1 (LayerNorm 2 prologue, GeLU), fc2 (+ h). A GEMV op's output rows are split evenly over the
// blocks; block b's rows of a weight are one contiguous range of memory, its "share". The attention's
// (sequence, head) tasks are split by key ranges over the blocks (attention_splits).
//
// The producer walks the block's shares of every layer in order, cutting each into chunks of all its
// rows and a range of columns (Chunks), and copies chunk after chunk into a ring of shared-memory
// slots (cp.async, swizzled), gated only by free slots (mbarriers): it never waits for an activation,
// so the HBM keeps streaming the weights of the next ops while the consumers wait for other blocks.
//
// The consumers, per op: wait until every block (every attention task) of the op they depend on has
// counted itself done in a global counter (acquire), read the input rows into shared memory (with the
// LayerNorm where there is one; the projection merges the attention's splits), then take the op's chunks as they land on the tensor cores
// (mma.m16n8k16, the weights as A and the input rows as B's columns), add the warps' partial sums,
// apply bias and epilogue and count the block done (release). The roundings are decode_linear.cu's,
// and the attention is cached_attention.cu's whole-head kernel over 480 threads, so the stack equals
// the five-kernel fused layer up to fp32 summation order.
//
// The counters grow by one launch's worth per launch: every block reads the launch's epoch at entry,
// waits for (epoch + 1) x the op's count, and the last block to finish advances the epoch. Waits that
// last over two seconds trap (a broken dependency fails loudly instead of hanging the GPU).
#include <algorithm>
#include <type_traits>

#include "kernels/common.cuh"
#include "kernels/decode_block.cuh"
#include "kernels/decode_stack.h"

// Measurement: the per-op device functions as calls (one copy of their code) or inlined.
#ifndef TESSERA_DECODE_STACK_NOINLINE
#define TESSERA_STACK_NOINLINE __forceinline__
#else
#define TESSERA_STACK_NOINLINE __noinline__
#endif

namespace tessera::kernels {

namespace {

// 16 warps in all: 4 a scheduler, so up to 128 registers a thread (17 would cap them at 96, and a
// spill goes to local memory through an L1 the ring has left at ~28 KB). One producer warp issued
// cp.async too slowly (~2.1 TB/s copies alone on an H100), two reach ~2.7.
constexpr int kConsumerWarps = 14;
constexpr int kConsumerThreads = 32 * kConsumerWarps;
constexpr int kProducerWarps = 2;
constexpr int kProducerThreads = 32 * kProducerWarps;
constexpr int kThreads = kConsumerThreads + kProducerThreads;
constexpr int kMaxSlots = 32;
constexpr int kDefaultSlotBytes = 48 * 1024;
constexpr int kMaxSplits = 6;  // attention_splits' most
constexpr int kPasses = 2;  // the attention's passes a chunk (120 keys at head_dim 64: a split's range at batch 1)
constexpr int kSyncStride = 32;
constexpr int kTraceEvents = 32;  // DecodeStackArgs::trace's stamps of an op
enum Op : int { kQkv = 0, kAttention = 1, kProj = 2, kFc1 = 3, kFc2 = 4, kOps = 5 };
enum class Epilogue : int { none, gelu_tanh, gelu_erf, residual_add };

// ---- PTX helpers (sm_90) ----
__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __noinline__ void deadline_passed(const char* what) {
  printf("decode_stack: block %d waited over 2 s for %s\n", static_cast<int>(blockIdx.x), what);
  __trap();
}
__device__ __forceinline__ void check_deadline(uint64_t start, const char* what) {
  if (global_ns() - start > 2000000000ull) deadline_passed(what);
}
__device__ __forceinline__ void barrier_init(uint64_t* bar, uint32_t count) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_address(bar)), "r"(count) : "memory");
#endif
}
__device__ __forceinline__ void barrier_init_fence() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}
__device__ __forceinline__ bool barrier_try_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done = 1;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(shared_address(bar)), "r"(parity)
      : "memory");
#endif
  return done != 0;
}
__device__ __forceinline__ bool barrier_test_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done = 1;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "{\n .reg .pred p;\n mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(shared_address(bar)), "r"(parity)
      : "memory");
#endif
  return done != 0;
}
__device__ __forceinline__ void barrier_spin(uint64_t* bar, uint32_t parity, const char* what) {
  if (barrier_test_wait(bar, parity)) return;
  const uint64_t start = global_ns();
  while (!barrier_test_wait(bar, parity)) check_deadline(start, what);
}
__device__ __forceinline__ void barrier_wait(uint64_t* bar, uint32_t parity, const char* what) {
  if (barrier_try_wait(bar, parity)) return;
  const uint64_t start = global_ns();
  while (!barrier_try_wait(bar, parity)) check_deadline(start, what);
}
__device__ __forceinline__ void barrier_arrive(uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(shared_address(bar)) : "memory");
#endif
}
// 16 bytes from global to shared memory, asynchronously (LDGSTS, L2 only).
__device__ __forceinline__ void async_copy16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(shared_address(dst)), "l"(src) : "memory");
}
// The barrier's arrival once every cp.async this thread issued before has landed.
__device__ __forceinline__ void barrier_arrive_on_copies(uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(shared_address(bar)) : "memory");
#endif
}
__device__ __forceinline__ uint32_t load_acquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
// The consumer warps' own barrier (the producer warp never joins).
__device__ __forceinline__ void consumers_sync() { asm volatile("bar.sync 1, %0;" ::"r"(kConsumerThreads) : "memory"); }

// ---- the work plan, computed the same way by the producer and the consumers ----
struct Geometry {
  int grid, slot_bytes, slots, max_block_rows, x_elems;  // x_elems: per input row in shared memory
  size_t x_offset, ring_offset, shared_bytes;
};

__device__ __forceinline__ int share_begin(int n, int b, int grid) { return n * b / grid; }  // n * grid < 2^31

// A share of `rows` rows of k elements (k a multiple of 64) cut into slot-sized chunks of every row
// of the share and `width` columns each (a multiple of 64; the last chunk may be narrower). In a slot,
// row r of a chunk of nc columns starts at byte r * 2 nc, and its 16-byte vector v sits at vector
// (v ^ 4 (r & 1)): the 8 lanes of an ldmatrix-free fragment load (rows g and g + 1, four vectors
// each) then hit all 32 banks once.
struct Chunks {
  int width, count;
  __device__ Chunks(int rows, int k, int esize, int slot_bytes) {
    if (rows <= 0) {
      width = k, count = 0;
      return;
    }
    int w = slot_bytes / (esize * rows) / 64 * 64;
    w = max(64, min(w, k));
    count = (k + w - 1) / w;
    width = ((k + count - 1) / count + 63) / 64 * 64;
    count = (k + width - 1) / width;
  }
};

__device__ __forceinline__ int swizzled_vector(int v, int r) { return v ^ ((r & 1) << 2); }

template <typename T>
struct Workspace {  // decode_stack_workspace_bytes' layout
  T *qkv, *h, *activation, *x[2];
  float *attention_out, *attention_stats;  // the attention's partial results: [rows, heads, splits] x (head_dim | max, sum)
  uint32_t *counters, *done, *epoch;
};

// The attention of one (sequence, head) is split over this many blocks (key ranges), so that the
// rows x heads tasks fill the grid (a 25-head model at batch 1: 5 splits, 125 tasks).
__host__ __device__ inline int attention_splits(int rows, int heads, int grid) {
  const int splits = grid / (rows * heads);
  return splits < 1 ? 1 : splits > kMaxSplits ? kMaxSplits : splits;
}

__host__ __device__ inline size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

// The workspace's parts at their byte offsets from base (base may be null: then only the size, the
// return value, matters).
template <typename T>
__host__ __device__ inline size_t workspace_of(void* base, const DecodeStackArgs& a, int grid, Workspace<T>& w) {
  char* p = static_cast<char*>(base);
  size_t offset = 0;
  const size_t rows = static_cast<size_t>(a.rows), h = static_cast<size_t>(a.hidden);
  const auto take = [&](size_t elems) {
    T* t = reinterpret_cast<T*>(p + offset);
    offset += align_up(elems * sizeof(T), 128);
    return t;
  };
  w.qkv = take(rows * 3 * h);
  w.h = take(rows * h);
  w.activation = take(rows * static_cast<size_t>(a.ffn));
  w.x[0] = take(rows * h);
  w.x[1] = take(rows * h);
  const size_t parts = rows * static_cast<size_t>(a.heads) * attention_splits(a.rows, a.heads, grid);
  w.attention_out = reinterpret_cast<float*>(p + offset);
  offset += align_up(parts * static_cast<size_t>(a.head_dim) * sizeof(float), 128);
  w.attention_stats = reinterpret_cast<float*>(p + offset);
  offset += align_up(parts * 2 * sizeof(float), 128);
  w.counters = reinterpret_cast<uint32_t*>(p + offset);
  offset += static_cast<size_t>(a.num_layers) * kOps * kSyncStride * sizeof(uint32_t);
  w.done = reinterpret_cast<uint32_t*>(p + offset);
  offset += kSyncStride * sizeof(uint32_t);
  w.epoch = reinterpret_cast<uint32_t*>(p + offset);
  offset += kSyncStride * sizeof(uint32_t);
  return offset;
}

// ---- the consumers' pieces ----

// A measurement stamp (DecodeStackArgs::trace) of layer l, op, this block, event e.
__device__ __forceinline__ void stamp(const DecodeStackArgs& a, int l, int op, int e) {
  if (a.trace) a.trace[((static_cast<size_t>(l) * kOps + op) * gridDim.x + blockIdx.x) * kTraceEvents + e] = global_ns();
}


// Activations other blocks wrote in this launch: read from L2 (this SM's L1 may hold the previous
// layer's values at the same address).
__device__ __forceinline__ float load_cg(const __nv_bfloat16* p) { return __bfloat162float(__ldcg(p)); }
__device__ __forceinline__ float load_cg(const __half* p) { return __half2float(__ldcg(p)); }


// Waits (thread 0, then the consumers' barrier) until *counter reaches target (wrap-safe).
__device__ __forceinline__ void wait_counter(const uint32_t* counter, uint32_t target, int ct, int debug) {
  if (ct == 0 && !(debug & 1)) {
    if (static_cast<int32_t>(load_acquire(counter) - target) < 0) {
      const uint64_t start = global_ns();
      while (static_cast<int32_t>(load_acquire(counter) - target) < 0) check_deadline(start, "another block");
    }
  }
  consumers_sync();
}
// After the consumers' stores: count this block (n tasks) done (release).
__device__ __forceinline__ void signal_counter(uint32_t* counter, uint32_t n, int ct) {
  consumers_sync();
  if (ct == 0 && n > 0) {
    // A release at GPU scope: it orders the block's stores (ordered before it by the barrier) before
    // the count, without a full fence.
    asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(counter), "r"(n) : "memory");
  }
}

// The kRows input rows [kRows, k] into xs: a copy, or LayerNorm (fp32 two-pass statistics over the
// held values, output rounded to T) as decode_block.cuh's layernorm_block, over 512 threads.
template <typename T, int kRows>
__device__ __forceinline__ void load_input(const T* in, int k, bool layernorm, const uint4& gamma, const uint4& beta,
                                           float eps, T* xs, float (*red)[kConsumerWarps], int ct) {
  constexpr int kVec = 16 / sizeof(T);
  const int vectors = k / kVec, lane = ct & 31, warp = ct >> 5;
  if (!layernorm) {
    for (int i = ct; i < kRows * vectors; i += kConsumerThreads)
      reinterpret_cast<uint4*>(xs)[i] = __ldcg(reinterpret_cast<const uint4*>(in) + i);
    consumers_sync();
    return;
  }
  const bool holds = ct < vectors;
  uint4 raw[kRows];
#pragma unroll
  for (int m = 0; m < kRows; ++m)
    if (holds) raw[m] = __ldcg(reinterpret_cast<const uint4*>(in + static_cast<int64_t>(m) * k) + ct);
  float mean[kRows];
#pragma unroll
  for (int m = 0; m < kRows; ++m) {
    float f[kVec], sum = 0.0f;
    if (holds) {
      unpack16<T>(raw[m], f);
#pragma unroll
      for (int e = 0; e < kVec; ++e) sum += f[e];
    }
    sum = warp_sum(sum);
    if (lane == 0) red[m][warp] = sum;
  }
  consumers_sync();
#pragma unroll
  for (int m = 0; m < kRows; ++m) mean[m] = warp_sum(lane < kConsumerWarps ? red[m][lane] : 0.0f) / static_cast<float>(k);
#pragma unroll
  for (int m = 0; m < kRows; ++m) {
    float f[kVec], sq = 0.0f;
    if (holds) {
      unpack16<T>(raw[m], f);
#pragma unroll
      for (int e = 0; e < kVec; ++e) sq += (f[e] - mean[m]) * (f[e] - mean[m]);
    }
    sq = warp_sum(sq);
    if (lane == 0) red[kRows + m][warp] = sq;  // rows kRows..: the variance's (no barrier to reuse the means')
  }
  consumers_sync();
  float rstd[kRows];
#pragma unroll
  for (int m = 0; m < kRows; ++m)
    rstd[m] = rsqrtf(warp_sum(lane < kConsumerWarps ? red[kRows + m][lane] : 0.0f) / static_cast<float>(k) + eps);
  if (holds) {
    float g[kVec], b[kVec];
    unpack16<T>(gamma, g);
    unpack16<T>(beta, b);
#pragma unroll
    for (int m = 0; m < kRows; ++m) {
      float f[kVec];
      unpack16<T>(raw[m], f);
      uint4 packed;
      T* p = reinterpret_cast<T*>(&packed);
#pragma unroll
      for (int e = 0; e < kVec; ++e) store_f(p + e, (f[e] - mean[m]) * rstd[m] * g[e] + b[e]);
      *reinterpret_cast<uint4*>(xs + static_cast<int64_t>(m) * k + ct * kVec) = packed;
    }
  }
  consumers_sync();
}

// The shared state of one block.
template <typename T>
struct Ring {
  unsigned char* slots;
  uint64_t* full;
  uint64_t* empty;
  int count, slot_bytes;
  int slot = 0;         // the next chunk's slot
  uint32_t phase = 0;   // its round's parity
  __device__ __forceinline__ void advance() {
    if (++slot == count) slot = 0, phase ^= 1u;
  }
};

// (m, l, o[kN]) <- the merge of two softmax partials (max, sum of exp, unnormalised output), as
// cached_attention.cu's.
template <int kN>
__device__ __forceinline__ void merge_partial(float& m, float& l, float* o, float m2, float l2, const float* o2) {
  const float mm = fmaxf(m, m2);
  const float a = m == -INFINITY ? 0.0f : __expf(m - mm), b = m2 == -INFINITY ? 0.0f : __expf(m2 - mm);
  l = l * a + l2 * b;
#pragma unroll
  for (int e = 0; e < kN; ++e) o[e] = o[e] * a + o2[e] * b;
  m = mm;
}

// The attention scratch in shared memory: the warps' softmax partials.
template <int kHn>
struct AttentionShared {
  float m[kConsumerWarps], l[kConsumerWarps], o[kConsumerWarps][kHn];
};

// One (sequence m, head h, split) task: keys [k0, k1) of 0..past (the new token's, index past, from
// qkv), with the whole-head kernel's algorithm (cached_attention.cu) over 480 threads: the task's
// cached rows are requested before waiting for the QKV op; the split that holds the new token appends
// its key and value to the cache; an online softmax runs over the range; the key groups of a warp
// and the warps merge in fixed order; the task writes its unnormalised output and (max, sum) to
// out / stats (merged by the projection's input read, load_context).
template <typename T, int kLanes>
__device__ __forceinline__ void attention_task(const DecodeStackArgs& a, const DecodeStackLayer& layer, const T* qkv,
                                               float* out, float* stats, int64_t past, int m, int h, int split,
                                               int splits,
                                               const uint32_t* qkv_done, uint32_t qkv_target,
                                               AttentionShared<kLanes * (16 / sizeof(T))>& sh, int ct) {
  constexpr int kVec = 16 / sizeof(T);
  constexpr int kGroups = kConsumerThreads / kLanes;  // keys per pass
  constexpr int kHn = kLanes * kVec;
  const int64_t hidden = a.hidden, keys = past + 1;
  const int64_t per_split = (keys + splits - 1) / splits, k0 = split * per_split, k1 = min(keys, k0 + per_split);
  const int sub = ct % kLanes, group = ct / kLanes, warp = ct / 32, lane = ct % 32;
  const uint8_t* mask = a.key_mask ? a.key_mask + m * a.capacity : nullptr;
  T* k_rows = static_cast<T*>(layer.k_cache) + m * a.capacity * hidden + h * kHn;
  T* v_rows = static_cast<T*>(layer.v_cache) + m * a.capacity * hidden + h * kHn;
  const T* q_new = qkv + m * 3 * hidden + h * 3 * kHn;  // this head's [q, k, v]
  uint4 kr[kPasses], vr[kPasses];
  bool live[kPasses];
  const auto load_chunk = [&](int64_t c0, bool cached, bool fresh) {
#pragma unroll
    for (int p = 0; p < kPasses; ++p) {
      const int64_t j = c0 + int64_t(p) * kGroups + group;
      if (cached) live[p] = j < k1 && (!mask || mask[j]);
      if (live[p]) {
        if (j < past && cached) {
          kr[p] = *reinterpret_cast<const uint4*>(k_rows + j * hidden + sub * kVec);
          vr[p] = *reinterpret_cast<const uint4*>(v_rows + j * hidden + sub * kVec);
        } else if (j >= past && fresh) {
          kr[p] = __ldcg(reinterpret_cast<const uint4*>(q_new + kHn) + sub);
          vr[p] = __ldcg(reinterpret_cast<const uint4*>(q_new + 2 * kHn) + sub);
        }
      }
    }
  };
  load_chunk(k0, true, false);
  wait_counter(qkv_done, qkv_target, ct, a.debug);
  if (ct < kLanes && k0 <= past && past < k1) {  // the new key and value into the cache, for the next steps
    reinterpret_cast<uint4*>(k_rows + past * hidden)[ct] = __ldcg(reinterpret_cast<const uint4*>(q_new + kHn) + ct);
    reinterpret_cast<uint4*>(v_rows + past * hidden)[ct] = __ldcg(reinterpret_cast<const uint4*>(q_new + 2 * kHn) + ct);
  }
  load_chunk(k0, false, true);
  float q[kVec];
  {
    float f[kVec];
    unpack16<T>(__ldcg(reinterpret_cast<const uint4*>(q_new) + sub), f);
#pragma unroll
    for (int e = 0; e < kVec; ++e) q[e] = f[e] * a.softmax_scale;
  }
  float m_run = -INFINITY, l_run = 0.0f, acc[kVec];
#pragma unroll
  for (int e = 0; e < kVec; ++e) acc[e] = 0.0f;
  for (int64_t c0 = k0; c0 < k1; c0 += int64_t(kGroups) * kPasses) {  // uniform over the consumers
    if (c0 > k0) load_chunk(c0, true, true);
    float score[kPasses], chunk_max = -INFINITY;
#pragma unroll
    for (int p = 0; p < kPasses; ++p) {
      float dot = 0.0f;
      if (live[p]) {
        const T* ke = reinterpret_cast<const T*>(&kr[p]);
#pragma unroll
        for (int e = 0; e < kVec; ++e) dot += q[e] * load_f(ke + e);
      }
#pragma unroll
      for (int off = kLanes / 2; off > 0; off /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, off);
      score[p] = live[p] ? dot : -INFINITY;
      chunk_max = fmaxf(chunk_max, score[p]);
    }
    const float m_new = fmaxf(m_run, chunk_max);
    if (m_new != -INFINITY) {
      const float rescale = m_run == -INFINITY ? 0.0f : __expf(m_run - m_new);
      l_run *= rescale;
#pragma unroll
      for (int e = 0; e < kVec; ++e) acc[e] *= rescale;
#pragma unroll
      for (int p = 0; p < kPasses; ++p) {
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
    for (int e = 0; e < kVec; ++e) sh.o[warp][sub * kVec + e] = acc[e];
    if (lane == 0) sh.m[warp] = m_run, sh.l[warp] = l_run;
  }
  consumers_sync();
  const size_t part = (static_cast<size_t>(m) * a.heads + h) * splits + split;
  for (int d = ct; d < kHn; d += kConsumerThreads) {
    float mm = -INFINITY, l = 0.0f, o = 0.0f;
    for (int w = 0; w < kConsumerWarps; ++w) merge_partial<1>(mm, l, &o, sh.m[w], sh.l[w], &sh.o[w][d]);
    out[part * kHn + d] = o;
    if (d == 0) stats[2 * part] = mm, stats[2 * part + 1] = l;
  }
  consumers_sync();  // sh is reused by the next task
}

// The projection's input: the attention's context rows [kRows, hidden] into xs, each (sequence, head)
// merged from its splits' partial results (online-softmax merge in split order), rounded to T as the
// attention's output is stored (no key to attend: a zero row).
template <typename T, int kRows>
__device__ __forceinline__ void load_context(const float* out, const float* stats, int heads, int head_dim, int splits,
                                             T* xs, int ct) {
  const int hidden = heads * head_dim;
  for (int i = ct; i < kRows * hidden / 2; i += kConsumerThreads) {  // two values a thread
    const int m = i / (hidden / 2), c = (i % (hidden / 2)) * 2, h = c / head_dim, d = c % head_dim;
    const size_t part0 = (static_cast<size_t>(m) * heads + h) * splits;
    float mm = -INFINITY, l = 0.0f, o[2] = {0.0f, 0.0f};
    float2 ml[kMaxSplits], o2[kMaxSplits];
#pragma unroll
    for (int s = 0; s < kMaxSplits; ++s) {  // every load in flight before the first is used
      if (s < splits) {
        ml[s] = __ldcg(reinterpret_cast<const float2*>(stats) + part0 + s);
        o2[s] = __ldcg(reinterpret_cast<const float2*>(out + (part0 + s) * head_dim + d));
      }
    }
#pragma unroll
    for (int s = 0; s < kMaxSplits; ++s) {
      if (s < splits) {
        const float os[2] = {o2[s].x, o2[s].y};
        merge_partial<2>(mm, l, o, ml[s].x, ml[s].y, os);
      }
    }
#pragma unroll
    for (int e = 0; e < 2; ++e) store_f(xs + static_cast<int64_t>(m) * hidden + c + e, l > 0.0f ? o[e] / l : 0.0f);
  }
  consumers_sync();
}

// D (16 x 8, fp32) += A (16 x 16) B (16 x 8): A's registers {a0 a1} {a2 a3} {a4 a5} {a6 a7} hold
// (row g, k 2t, 2t+1), (row g + 8, k 2t..), (row g, k 2t + 8..), (row g + 8, k 2t + 8..), B's {b0 b1}
// {b2 b3} (k 2t.., column g), (k 2t + 8.., column g), D's (row g, columns 2t, 2t + 1), (row g + 8, ..),
// for lane 4g + t.
template <typename T>
__device__ __forceinline__ void mma16816(float* d, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
#endif
}

constexpr int kMaxGroups = 4;  // 16-row groups of a block's share of one op (64 rows)

// The consumers' partial sums of one op: warp, share row, sequence.
template <int kRows>
struct GemvShared {
  float partial[kConsumerWarps][16 * kMaxGroups][kRows];
};

// One GEMV op's chunks for the consumers: the block's rows [0, rows) of its share (weights in the
// ring) against the input rows in xs, on the tensor cores. The sum over k runs in any order, so lane
// 4g + t takes one 16-byte vector of share rows g and g + 8 (a 32-column unit u: vector 4u + t) as
// two k16 steps of A, and the input's same vector as B (sequence g's column). Rows past the share and
// columns past kRows are computed from clamped (valid) addresses and never read, so the loop has no
// predicates. The units of a chunk go round the warps (starting where the previous chunk stopped);
// every warp accumulates its units of every 16-row group in registers over the op, then writes its
// partial sums to `sh` (the caller adds the warps' sums in warp order).
template <typename T, int kRows>
__device__ __forceinline__ void gemv_chunks(Ring<T>& ring, const Geometry& g, const T* xs, int rows, int k,
                                            GemvShared<kRows>& sh, int ct, int debug) {
  const int lane = ct & 31, warp = ct >> 5, gid = lane >> 2, tig = lane & 3;
  const int groups = (rows + 15) / 16;
  float acc[kMaxGroups][4];
#pragma unroll
  for (int q = 0; q < kMaxGroups; ++q) acc[q][0] = acc[q][1] = acc[q][2] = acc[q][3] = 0.0f;
  const int last_row = max(rows - 1, 0);
  const Chunks chunks(rows, k, sizeof(T), g.slot_bytes);
  const unsigned char* x_lane = reinterpret_cast<const unsigned char*>(xs + static_cast<int64_t>(min(gid, kRows - 1)) * k) + 16 * tig;
  int first = warp;  // this warp's first unit of the chunk
  for (int c = 0; c < chunks.count; ++c) {
    const int c0 = c * chunks.width, nc = min(chunks.width, k - c0), units = nc / 32;
    if (lane == 0 && !(debug & 16)) {
      if (debug & 8) barrier_spin(&ring.full[ring.slot], ring.phase, "a weight chunk");
      else barrier_wait(&ring.full[ring.slot], ring.phase, "a weight chunk");
    }
    __syncwarp();
    const unsigned char* base = ring.slots + static_cast<size_t>(ring.slot) * ring.slot_bytes + 16 * tig;
    const int row_bytes = nc * static_cast<int>(sizeof(T));
    const unsigned char* xc = x_lane + static_cast<size_t>(c0) * sizeof(T);
    if (!(debug & 2)) {
      for (int u = first; u < units; u += kConsumerWarps) {  // warp-uniform
        const uint4 xv = *reinterpret_cast<const uint4*>(xc + 64 * u);
#pragma unroll
        for (int q = 0; q < kMaxGroups; ++q) {
          if (q < groups) {
            // Row r's vector 4u + t sits at (4u + t) ^ 4 (r & 1): unit u ^ (r & 1), lane slot t.
            const int ra = min(16 * q + gid, last_row), rb = min(16 * q + gid + 8, last_row);
            const uint4 wa = *reinterpret_cast<const uint4*>(base + ra * row_bytes + 64 * (u ^ (ra & 1)));
            const uint4 wb = *reinterpret_cast<const uint4*>(base + rb * row_bytes + 64 * (u ^ (rb & 1)));
            mma16816<T>(acc[q], wa.x, wb.x, wa.y, wb.y, xv.x, xv.y);
            mma16816<T>(acc[q], wa.z, wb.z, wa.w, wb.w, xv.z, xv.w);
          }
        }
      }
    }
    first = (first + kConsumerWarps - units % kConsumerWarps) % kConsumerWarps;
    __syncwarp();
    if (lane == 0) barrier_arrive(&ring.empty[ring.slot]);
    ring.advance();
  }
#pragma unroll
  for (int q = 0; q < kMaxGroups; ++q) {
    if (q < groups) {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int s = 2 * tig + j;
        if (s < kRows) {
          sh.partial[warp][16 * q + gid][s] = acc[q][j];
          sh.partial[warp][16 * q + gid + 8][s] = acc[q][2 + j];
        }
      }
    }
  }
}

// One GEMV op of a layer for the consumers, as data, so that one copy of its code serves all four
// (a persistent kernel's code must stay within the instruction caches).
template <typename T>
struct GemvJob {
  const T* in;  // [kRows, k]
  const T* ln_weight;  // LayerNorm of the input first (null: none)
  const T* ln_bias;
  const T* bias;
  const T* residual;  // for Epilogue::residual_add
  T* out;             // [kRows, n_out]
  int k, n_out, row0, rows, layer, op;
  Epilogue epilogue;
  const uint32_t* wait_on;  // null: no wait
  uint32_t wait_target;
  uint32_t* signal;
  const float* attention_out;  // non-null: the input is the attention's partial results (load_context)
  const float* attention_stats;
  int splits;
};

// What the consumers of a block keep for the whole launch.
template <typename T, int kRows>
struct Consumers {
  Ring<T> ring;
  const Geometry* g;
  T* xs;
  float (*red)[kConsumerWarps];
  GemvShared<kRows>* gemv;
  const DecodeStackArgs* a;
};

// The op: the parameters that do not depend on other blocks (LayerNorm weights, bias) and the
// residual (written before the previous op's wait) are requested first, then the wait, the input
// rows, the chunks, the sum over warps with bias and epilogue (consumer thread i: share row
// i / kRows, sequence i % kRows), and the signal.
template <typename T, int kRows>
__device__ __forceinline__ void gemv_op(const GemvJob<T>& job, Consumers<T, kRows>& c, int ct) {
  constexpr int kVec = 16 / sizeof(T);
  const DecodeStackArgs& a = *c.a;
  uint4 gamma = make_uint4(0, 0, 0, 0), beta = gamma;
  const bool layernorm = job.ln_weight != nullptr;
  if (layernorm && ct < job.k / kVec) {
    gamma = __ldg(reinterpret_cast<const uint4*>(job.ln_weight) + ct);
    beta = __ldg(reinterpret_cast<const uint4*>(job.ln_bias) + ct);
  }
  const int r = ct / kRows, m = ct % kRows;
  const bool finishes = r < job.rows;
  // Held as loaded (converted in the epilogue), so that the loads stay in flight through the wait.
  T bias = T(0.0f), residual = T(0.0f);
  if (finishes) {
    if (job.bias) bias = job.bias[job.row0 + r];
    if (job.epilogue == Epilogue::residual_add) residual = __ldcg(job.residual + static_cast<int64_t>(m) * job.n_out + job.row0 + r);
  }
  if (ct == 0) stamp(a, job.layer, job.op, 0);
  if (job.wait_on) wait_counter(job.wait_on, job.wait_target, ct, a.debug);
  if (ct == 0) stamp(a, job.layer, job.op, 6);
  if (a.debug & 64) {
  } else if (job.attention_out) {
    load_context<T, kRows>(job.attention_out, job.attention_stats, a.heads, a.head_dim, job.splits, c.xs, ct);
  } else {
    load_input<T, kRows>(job.in, job.k, layernorm, gamma, beta, a.ln_eps, c.xs, c.red, ct);
  }
  if (ct == 0) stamp(a, job.layer, job.op, 1);
  gemv_chunks<T, kRows>(c.ring, *c.g, c.xs, job.rows, job.k, *c.gemv, ct, a.debug);
  if (ct == 0) stamp(a, job.layer, job.op, 2);
  consumers_sync();
  if (finishes) {
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < kConsumerWarps; ++w) total += c.gemv->partial[w][r][m];
    float v = decode::round_to<T>(total + load_f(&bias));  // the linear's output, as the unfused path stores it
    if (job.epilogue == Epilogue::gelu_tanh) v = decode::gelu_tanh(v);
    else if (job.epilogue == Epilogue::gelu_erf) v = decode::gelu_erf(v);
    else if (job.epilogue == Epilogue::residual_add) v = load_f(&residual) + v;
    store_f(job.out + static_cast<int64_t>(m) * job.n_out + job.row0 + r, v);
  }
  if (ct == 0) stamp(a, job.layer, job.op, 7);
  if (!(a.debug & 64)) signal_counter(job.signal, 1, ct);
  if (ct == 0) stamp(a, job.layer, job.op, 3);
}

template <typename T>
struct OpWeights {
  const T* weight;
  int k, n_out;
};

template <typename T>
__device__ __forceinline__ OpWeights<T> op_weights(const DecodeStackArgs& a, const DecodeStackLayer& layer, int op) {
  switch (op) {
    case kQkv: return {static_cast<const T*>(layer.qkv_weight), a.hidden, 3 * a.hidden};
    case kProj: return {static_cast<const T*>(layer.proj_weight), a.hidden, a.hidden};
    case kFc1: return {static_cast<const T*>(layer.fc1_weight), a.hidden, a.ffn};
    default: return {static_cast<const T*>(layer.fc2_weight), a.ffn, a.hidden};
  }
}

// The producer warp: every GEMV share of every layer, in the consumers' order, chunk by chunk into the
// ring (Chunks' swizzled layout), 16 bytes a lane by cp.async; each lane arrives on the chunk's full
// barrier when its copies have landed.
template <typename T>
__device__ void produce(const DecodeStackArgs& a, const Geometry& g, Ring<T>& ring, int pt) {
  const int lane = pt & 31;
  constexpr int kVec = 16 / sizeof(T);
  const int b = blockIdx.x;
  uint32_t copied = 0;
  for (int l = 0; l < a.num_layers; ++l) {
    const DecodeStackLayer& layer = a.layers[l];
    for (int i = 0; i < 4; ++i) {
      const int op = i == 0 ? kQkv : i == 1 ? kProj : i == 2 ? kFc1 : kFc2;
      const OpWeights<T> w = op_weights<T>(a, layer, op);
      const int row0 = share_begin(w.n_out, b, g.grid), rows = share_begin(w.n_out, b + 1, g.grid) - row0;
      const Chunks chunks(rows, w.k, sizeof(T), g.slot_bytes);
      for (int c = 0; c < chunks.count; ++c, ring.advance(), ++copied) {
        const int c0 = c * chunks.width, nc = min(chunks.width, w.k - c0), vectors = nc / kVec;
        const int slot = ring.slot;
        if (copied >= ring.count) {  // the slot's previous chunk must have been taken (the phase before)
          if (lane == 0) {
            if (a.debug & 8) barrier_spin(&ring.empty[slot], ring.phase ^ 1u, "a free ring slot");
            else barrier_wait(&ring.empty[slot], ring.phase ^ 1u, "a free ring slot");
          }
          __syncwarp();
        }
        if (pt == 0 && c == 0) stamp(a, l, op, 4);
        if (pt == 0 && c + 1 == chunks.count) stamp(a, l, op, 5);
        unsigned char* dst = ring.slots + static_cast<size_t>(slot) * ring.slot_bytes;
        const T* src = w.weight + static_cast<int64_t>(row0) * w.k + c0;
        // Lane j copies vectors j, j + 32, ... of the chunk in row order: (r, v) advance without a
        // branch, so the warp stays converged and every cp.async is one whole-warp instruction (a
        // divergent wrap split them into partial ones: 4x slower).
        const int step_rows = kProducerThreads / vectors, step_vectors = kProducerThreads % vectors;
        const int total = rows * vectors;
        int r = pt / vectors, v = pt % vectors;
        for (int i = pt; i < total; i += kProducerThreads) {
          async_copy16(dst + (static_cast<size_t>(r) * vectors + swizzled_vector(v, r)) * 16,
                       src + static_cast<int64_t>(r) * w.k + v * kVec);
          v += step_vectors;
          const int wrap = v >= vectors ? 1 : 0;
          v -= wrap * vectors;
          r += step_rows + wrap;
        }
        barrier_arrive_on_copies(&ring.full[slot]);
      }
    }
  }
}

template <typename T, int kRows, int kLanes>
__global__ void __launch_bounds__(kThreads, 1) decode_stack_kernel(const __grid_constant__ DecodeStackArgs a, const __grid_constant__ Geometry g) {
  constexpr int kHn = kLanes * (16 / sizeof(T));
  extern __shared__ __align__(128) unsigned char shared[];
  __shared__ uint64_t full[kMaxSlots], empty[kMaxSlots];
  __shared__ float red[2 * kRows][kConsumerWarps];
  // The attention's scratch and the GEMVs' partial sums are never live at once.
  __shared__ union Scratch {
    AttentionShared<kHn> attention;
    GemvShared<kRows> gemv;
  } scratch;
  __shared__ uint32_t epoch_shared;
  const int ct = threadIdx.x;
  Workspace<T> ws;
  workspace_of<T>(a.workspace, a, g.grid, ws);
  if (ct == 0) {
    for (int s = 0; s < g.slots; ++s) barrier_init(&full[s], kProducerThreads), barrier_init(&empty[s], kConsumerWarps);
    barrier_init_fence();
    epoch_shared = *reinterpret_cast<volatile uint32_t*>(ws.epoch);
  }
  __syncthreads();
  const uint32_t epoch = epoch_shared;
  Ring<T> ring{shared + g.ring_offset, full, empty, g.slots, g.slot_bytes};
  if (ct >= kConsumerThreads) {  // the producer warp
    if (!(a.debug & 32)) produce<T>(a, g, ring, ct - kConsumerThreads);
    return;
  }

  Consumers<T, kRows> c{ring, &g, reinterpret_cast<T*>(shared + g.x_offset), red, &scratch.gemv, &a};
  const int splits = attention_splits(a.rows, a.heads, g.grid);
  const int64_t past = *a.past_device;  // the cached tokens, the same in every layer
  const int b = blockIdx.x, tasks = a.rows * a.heads * splits;
  const uint32_t block_target = (epoch + 1) * static_cast<uint32_t>(g.grid);
  const uint32_t task_target = (epoch + 1) * static_cast<uint32_t>(tasks);
  const Epilogue gelu = a.gelu_erf ? Epilogue::gelu_erf : Epilogue::gelu_tanh;
  for (int l = 0; l < a.num_layers; ++l) {
    const DecodeStackLayer& layer = a.layers[l];
    uint32_t* counter = ws.counters + static_cast<size_t>(l) * kOps * kSyncStride;
    const auto done = [&](int op) { return counter + op * kSyncStride; };
    const T* x_in = l == 0 ? static_cast<const T*>(a.in) : (l & 1) ? ws.x[1] : ws.x[0];
    T* x_out = l + 1 == a.num_layers ? static_cast<T*>(a.out) : (l & 1) ? ws.x[0] : ws.x[1];
    // The five ops in one loop that is not unrolled, so that each op's code exists once: a persistent
    // kernel's loop must stay inside the instruction caches (inlined four times, the GEMV code alone
    // made the kernel ~110 KB).
#pragma unroll 1
    for (int op = 0; op < kOps; ++op) {
      if (op == kAttention) {  // tasks t with t * grid / tasks == b, after every QKV block
        if (ct == 0) stamp(a, l, kAttention, 0);
        uint32_t mine = 0;
        for (int t = static_cast<int>((static_cast<int64_t>(b) * tasks + g.grid - 1) / g.grid);
             t < tasks && !(a.debug & 64); ++t) {
          if (static_cast<int64_t>(t) * g.grid / tasks != b) break;
          attention_task<T, kLanes>(a, layer, ws.qkv, ws.attention_out, ws.attention_stats, past, t / splits / a.heads,
                                    t / splits % a.heads, t % splits, splits, done(kQkv), block_target,
                                    scratch.attention, ct);
          ++mine;
        }
        if (ct == 0) stamp(a, l, kAttention, 2);
        signal_counter(done(kAttention), mine, ct);
        if (ct == 0) stamp(a, l, kAttention, 3);
        continue;
      }
      // [LN1 + QKV] after the previous layer's fc2 (the first layer's input is the launch's);
      // [proj + residual] after every attention task; [LN2 + fc1 + GeLU]; [fc2 + residual].
      GemvJob<T> job{};
      job.layer = l, job.op = op, job.signal = done(op), job.wait_target = block_target;
      if (op == kQkv) {
        job.in = x_in, job.ln_weight = static_cast<const T*>(layer.ln1_weight);
        job.ln_bias = static_cast<const T*>(layer.ln1_bias), job.bias = static_cast<const T*>(layer.qkv_bias);
        job.epilogue = Epilogue::none, job.out = ws.qkv;
        job.wait_on = l > 0 ? ws.counters + (static_cast<size_t>(l - 1) * kOps + kFc2) * kSyncStride : nullptr;
      } else if (op == kProj) {
        job.attention_out = ws.attention_out, job.attention_stats = ws.attention_stats, job.splits = splits;
        job.bias = static_cast<const T*>(layer.proj_bias), job.epilogue = Epilogue::residual_add;
        job.residual = x_in, job.out = ws.h, job.wait_on = done(kAttention), job.wait_target = task_target;
      } else if (op == kFc1) {
        job.in = ws.h, job.ln_weight = static_cast<const T*>(layer.ln2_weight);
        job.ln_bias = static_cast<const T*>(layer.ln2_bias), job.bias = static_cast<const T*>(layer.fc1_bias);
        job.epilogue = gelu, job.out = ws.activation, job.wait_on = done(kProj);
      } else {
        job.in = ws.activation, job.bias = static_cast<const T*>(layer.fc2_bias), job.epilogue = Epilogue::residual_add;
        job.residual = ws.h, job.out = x_out, job.wait_on = done(kFc1);
      }
      const OpWeights<T> w = op_weights<T>(a, layer, op);
      job.k = w.k, job.n_out = w.n_out;
      job.row0 = share_begin(w.n_out, b, g.grid), job.rows = share_begin(w.n_out, b + 1, g.grid) - job.row0;
      gemv_op<T, kRows>(job, c, ct);
    }
  }
  // The last block out advances the epoch for the next launch.
  consumers_sync();
  if (ct == 0) {
    __threadfence();
    if (atomicAdd(ws.done, 1u) == static_cast<uint32_t>(g.grid) - 1) {
      *reinterpret_cast<volatile uint32_t*>(ws.done) = 0;
      __threadfence();
      atomicAdd(ws.epoch, 1u);
    }
  }
}

// ---- host side ----

int sm_count() {
  int device = 0, sms = 0;
  TESSERA_CUDA_CHECK(cudaGetDevice(&device));
  TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}
int max_shared_per_block() {
  int device = 0, bytes = 0;
  TESSERA_CUDA_CHECK(cudaGetDevice(&device));
  TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return bytes;
}

// Static shared memory of the kernel (barriers, reductions, attention scratch), with room to spare.
constexpr size_t kStaticShared = 20 * 1024;

// The geometry of a launch, or slots == 0 when the shape does not fit.
Geometry geometry_of(size_t esize, const DecodeStackArgs& a) {
  Geometry g{};
  g.grid = sm_count();
  const int widest = std::max({3 * a.hidden, a.ffn, a.hidden});
  g.max_block_rows = (widest + g.grid - 1) / g.grid;
  g.x_elems = std::max(a.hidden, a.ffn);
  g.x_offset = 0;
  g.ring_offset = align_up(g.x_offset + static_cast<size_t>(a.rows) * g.x_elems * esize, 128);
  g.slot_bytes = a.slot_bytes > 0 ? a.slot_bytes / 128 * 128 : kDefaultSlotBytes;
  const int64_t budget = static_cast<int64_t>(max_shared_per_block()) - static_cast<int64_t>(kStaticShared) -
                         static_cast<int64_t>(g.ring_offset);
  g.slots = static_cast<int>(std::min<int64_t>(kMaxSlots, budget / g.slot_bytes));
  if (a.slots > 0) g.slots = std::min(g.slots, a.slots);
  // A chunk holds at least 64 columns of every row of a share.
  if (g.slots < 2 || g.slot_bytes < g.max_block_rows * 64 * static_cast<int>(esize)) g.slots = 0;
  g.shared_bytes = g.ring_offset + static_cast<size_t>(std::max(g.slots, 0)) * g.slot_bytes;
  return g;
}

template <typename T, int kRows, int kLanes>
void launch(const DecodeStackArgs& a, const Geometry& g, cudaStream_t s) {
  const auto kernel = decode_stack_kernel<T, kRows, kLanes>;
  TESSERA_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(g.shared_bytes)));
  // No more shared memory than the ring needs: the rest of the SM's 256 KB stays L1 (local memory).
  const int percent = static_cast<int>((g.shared_bytes + kStaticShared) * 100 / max_shared_per_block()) + 1;
  TESSERA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, std::min(percent, 100)));
  kernel<<<g.grid, kThreads, g.shared_bytes, s>>>(a, g);
}

template <typename T, int kRows>
void launch_lanes(const DecodeStackArgs& a, const Geometry& g, cudaStream_t s) {
  if (a.head_dim == 64) launch<T, kRows, 8>(a, g, s);
  else launch<T, kRows, 16>(a, g, s);
}

template <typename T>
void launch_rows(const DecodeStackArgs& a, const Geometry& g, cudaStream_t s) {
  switch (a.rows) {
    case 1: launch_lanes<T, 1>(a, g, s); break;
    case 2: launch_lanes<T, 2>(a, g, s); break;
    case 3: launch_lanes<T, 3>(a, g, s); break;
    default: launch_lanes<T, 4>(a, g, s); break;
  }
}

}  // namespace

size_t decode_stack_workspace_bytes(DType t, const DecodeStackArgs& a) {
  Workspace<__half> halves;
  Workspace<float> floats;
  const int grid = sm_count();
  return dtype_size(t) == 2 ? workspace_of<__half>(nullptr, a, grid, halves) : workspace_of<float>(nullptr, a, grid, floats);
}

bool decode_stack_applies(DType t, const DecodeStackArgs& a) {
  if (!(t == DType::bf16 || t == DType::f16)) return false;
  if (a.rows < 1 || a.rows > kDecodeStackMaxRows || a.num_layers < 1) return false;
  if (!(a.head_dim == 64 || a.head_dim == 128) || a.heads * a.head_dim != a.hidden) return false;
  // Chunks are whole 64-column pieces (Chunks), and a LayerNorm row is one vector a consumer thread.
  if (a.hidden % 64 != 0 || a.hidden > kConsumerThreads * 8 || a.ffn % 64 != 0 || !a.past_device) return false;
  int device = 0, major = 0;
  TESSERA_CUDA_CHECK(cudaGetDevice(&device));
  TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  if (major < 9) return false;
  const Geometry g = geometry_of(dtype_size(t), a);
  // A warp's lanes hold the bias and residual of its rows, one lane a (row, sequence).
  return g.slots > 0 && g.max_block_rows <= 16 * kMaxGroups;
}

void decode_stack_forward(DType t, const DecodeStackArgs& a, cudaStream_t s) {
  TESSERA_CHECK(decode_stack_applies(t, a), "decode_stack_forward: a shape, dtype or GPU it does not take (",
                dtype_name(t), ", rows ", a.rows, ", hidden ", a.hidden, ", head_dim ", a.head_dim, ", ffn ", a.ffn, ")");
  const Geometry g = geometry_of(dtype_size(t), a);
  if (t == DType::bf16) launch_rows<__nv_bfloat16>(a, g, s);
  else launch_rows<__half>(a, g, s);
  TESSERA_KERNEL_LAUNCH_CHECK();
}

}  // namespace tessera::kernels
