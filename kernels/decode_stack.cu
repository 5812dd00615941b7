// The persistent decode stack (decode_stack.h): all GPT blocks of a decode step in one kernel, one
// block per SM, each block one producer warp and 15 consumer warps (16 warps: 128 registers a thread).
// An experiment (session 26, docs/decode-gpu.md): it measured slower than the five-kernel fused layer.
//
// Work: every layer is five ops, QKV (LayerNorm 1 prologue), attention, proj (+ the layer input),
// fc1 (LayerNorm 2 prologue, GeLU), fc2 (+ h). A GEMV op's output rows are split evenly over the
// blocks; block b's rows of a weight are one contiguous range of memory, its "share". The attention's
// (sequence, head) tasks are spread over the blocks.
//
// The producer walks the block's shares of every layer in order, cutting each into chunks of whole
// rows (or pieces of a row longer than a slot) and copying chunk after chunk into a ring of
// shared-memory slots (cp.async, or one cp.async.bulk a chunk), gated only by free slots (mbarriers):
// it never waits for an activation, so the HBM keeps streaming the weights of the next ops while the
// consumers wait for other blocks.
//
// The consumers, per op: wait until every block (every attention task) of the op they depend on has
// counted itself done in a global counter (acquire), read the input rows into shared memory (with the
// LayerNorm where there is one), then take the op's chunks as they land (each warp its own rows,
// whole, with bias and epilogue as each row ends), and count the block done (release). The roundings
// are decode_linear.cu's, and the attention is cached_attention.cu's whole-head kernel over 480
// threads, so the stack equals the five-kernel fused layer up to fp32 summation order.
//
// The counters grow by one launch's worth per launch: every block reads the launch's epoch at entry,
// waits for (epoch + 1) x the op's count, and the last block to finish advances the epoch. Waits that
// last over two seconds trap (a broken dependency fails loudly instead of hanging the GPU).
#include <algorithm>

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
// spill goes to local memory through an L1 the ring has left at ~28 KB).
constexpr int kConsumerWarps = 15;
constexpr int kConsumerThreads = 32 * kConsumerWarps;
constexpr int kProducerWarps = 1;
constexpr int kProducerThreads = 32 * kProducerWarps;
constexpr int kThreads = kConsumerThreads + kProducerThreads;
constexpr int kMaxSlots = 32;
constexpr int kMaxSlotBytes = 16 * 1024;
constexpr int kPasses = 6;  // the attention's passes a chunk (cached_attention.cu's whole-head kernel)
constexpr int kSyncStride = 32;
constexpr int kTraceEvents = 32;  // DecodeStackArgs::trace's stamps of an op  // u32 words between counters (one 128-byte line each)
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
// The producer's arrival on a slot's "full" barrier, announcing the bytes its copy will deliver.
__device__ __forceinline__ void barrier_expect_bytes(uint64_t* bar, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(bar)), "r"(bytes)
               : "memory");
#endif
}
// bytes (a multiple of 16, both addresses 16-byte aligned) from global to shared memory; the
// barrier counts them when they have landed.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   shared_address(dst)),
               "l"(src), "r"(bytes), "r"(shared_address(bar))
               : "memory");
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

__device__ __forceinline__ int share_begin(int n, int b, int grid) {
  return static_cast<int>(static_cast<int64_t>(n) * b / grid);
}

// A share of `rows` rows of k elements cut into slot-sized chunks: whole rows, or pieces of one row.
struct Chunks {
  int rows_per_chunk, pieces, piece, count;
  __device__ Chunks(int rows, int k, int esize, int slot_bytes, int vec) {
    const int row_bytes = k * esize;
    if (row_bytes <= slot_bytes) {
      rows_per_chunk = slot_bytes / row_bytes, pieces = 1, piece = k;
      count = (rows + rows_per_chunk - 1) / rows_per_chunk;
    } else {
      rows_per_chunk = 1, pieces = (row_bytes + slot_bytes - 1) / slot_bytes;
      piece = ((k + pieces - 1) / pieces + vec - 1) / vec * vec;
      while (piece * esize > slot_bytes) ++pieces, piece = ((k + pieces - 1) / pieces + vec - 1) / vec * vec;
      pieces = (k + piece - 1) / piece;
      count = rows * pieces;
    }
  }
  // Chunk c: rows [r0, r0 + nr) of the share, columns [c0, c0 + nc).
  __device__ void at(int c, int rows, int k, int& r0, int& nr, int& c0, int& nc) const {
    if (pieces == 1) {
      r0 = c * rows_per_chunk, nr = min(rows_per_chunk, rows - r0), c0 = 0, nc = k;
    } else {
      r0 = c / pieces, nr = 1, c0 = (c % pieces) * piece, nc = min(piece, k - c0);
    }
  }
};

template <typename T>
struct Workspace {  // decode_stack_workspace_bytes' layout
  T *qkv, *context, *h, *activation, *x[2];
  uint32_t *counters, *done, *epoch;
};

__host__ __device__ inline size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

// The workspace's parts at their byte offsets from base (base may be null: then only the size, the
// return value, matters).
template <typename T>
__host__ __device__ inline size_t workspace_of(void* base, const DecodeStackArgs& a, Workspace<T>& w) {
  char* p = static_cast<char*>(base);
  size_t offset = 0;
  const size_t rows = static_cast<size_t>(a.rows), h = static_cast<size_t>(a.hidden);
  const auto take = [&](size_t elems) {
    T* t = reinterpret_cast<T*>(p + offset);
    offset += align_up(elems * sizeof(T), 128);
    return t;
  };
  w.qkv = take(rows * 3 * h);
  w.context = take(rows * h);
  w.h = take(rows * h);
  w.activation = take(rows * static_cast<size_t>(a.ffn));
  w.x[0] = take(rows * h);
  w.x[1] = take(rows * h);
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
    __threadfence();
    atomicAdd(counter, n);
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
  for (int m = 0; m < kRows; ++m) {
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < kConsumerWarps; ++w) total += red[m][w];
    mean[m] = total / static_cast<float>(k);
  }
  consumers_sync();  // red is reused for the variance
#pragma unroll
  for (int m = 0; m < kRows; ++m) {
    float f[kVec], sq = 0.0f;
    if (holds) {
      unpack16<T>(raw[m], f);
#pragma unroll
      for (int e = 0; e < kVec; ++e) sq += (f[e] - mean[m]) * (f[e] - mean[m]);
    }
    sq = warp_sum(sq);
    if (lane == 0) red[m][warp] = sq;
  }
  consumers_sync();
  if (holds) {
    float g[kVec], b[kVec];
    unpack16<T>(gamma, g);
    unpack16<T>(beta, b);
#pragma unroll
    for (int m = 0; m < kRows; ++m) {
      float total = 0.0f;
#pragma unroll
      for (int w = 0; w < kConsumerWarps; ++w) total += red[m][w];
      const float rstd = rsqrtf(total / static_cast<float>(k) + eps);
      float f[kVec];
      unpack16<T>(raw[m], f);
      uint4 packed;
      T* p = reinterpret_cast<T*>(&packed);
#pragma unroll
      for (int e = 0; e < kVec; ++e) store_f(p + e, (f[e] - mean[m]) * rstd * g[e] + b[e]);
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
  uint32_t next = 0;  // the running chunk index
};

// One GEMV op of the consumers: the block's rows [row0, row0 + rows) of weight [n_out, k] against
// the input rows in xs, chunk by chunk from the ring. Warp w owns the rows r = w, w + W, ... of the
// share (W consumer warps): its lanes sum a row's vectors in two fp32 accumulators each (across the
// pieces of a row longer than a slot), one warp reduction a row, then the lanes m < kRows apply bias
// and epilogue to sequence m's output and store it. A warp waits for every chunk (whether it holds
// rows of it or not) before it frees the slot, so the slot's arrivals stay in order. pre_bias: lane
// j's bias of row w + W (j / kRows) (loaded before the wait).
template <typename T, int kRows>
__device__ __forceinline__ void gemv(Ring<T>& ring, const Geometry& g, const T* xs, int row0, int rows, int k, int n_out,
                                     float pre_bias, Epilogue epilogue, const T* residual, T* out, int ct,
                                     bool skip_math, int debug, const DecodeStackArgs* trace_args, int trace_l,
                                     int trace_op) {
  constexpr int kVec = 16 / sizeof(T);
  const int lane = ct & 31, warp = ct >> 5;
  float pre_residual = 0.0f;  // lane j's residual of its row and sequence, as pre_bias
  if (epilogue == Epilogue::residual_add) {
    const int q = lane / kRows, m = lane % kRows, r = warp + kConsumerWarps * q;
    if (q < 32 / kRows && r < rows) pre_residual = load_cg(residual + static_cast<int64_t>(m) * n_out + row0 + r);
  }
  float acc[kRows], acc2[kRows];
#pragma unroll
  for (int m = 0; m < kRows; ++m) acc[m] = 0.0f, acc2[m] = 0.0f;
  const Chunks chunks(rows, k, sizeof(T), g.slot_bytes, kVec);
  for (int c = 0; c < chunks.count; ++c, ++ring.next) {
    int r0, nr, c0, nc;
    chunks.at(c, rows, k, r0, nr, c0, nc);
    const int slot = static_cast<int>(ring.next % ring.count);
    // One lane a warp waits, then the warp's barrier orders the other lanes' reads after it.
    if (lane == 0 && !(debug & 16)) {
      if (debug & 8) barrier_spin(&ring.full[slot], (ring.next / ring.count) & 1, "a weight chunk");
      else barrier_wait(&ring.full[slot], (ring.next / ring.count) & 1, "a weight chunk");
    }
    __syncwarp();
    if (ct == 0 && trace_args && c < 16) stamp(*trace_args, trace_l, trace_op, 6 + c);
    const uint4* w = reinterpret_cast<const uint4*>(ring.slots + static_cast<size_t>(slot) * ring.slot_bytes);
    const int nv = nc / kVec;
    const bool row_ends = chunks.pieces == 1 || c0 + nc == k;
    const int first = r0 + ((warp - r0 % kConsumerWarps) + kConsumerWarps) % kConsumerWarps;
    for (int r = skip_math ? r0 + nr : first; r < r0 + nr; r += kConsumerWarps) {  // warp-uniform
      const uint4* wr = w + (r - r0) * nv;
      const T* x0 = xs + c0;
      for (int v = lane; v < nv; v += 64) {
        const uint4 wa = wr[v];
        const bool second = v + 32 < nv;
        const uint4 wb = second ? wr[v + 32] : make_uint4(0, 0, 0, 0);
        const T* ea = reinterpret_cast<const T*>(&wa);
        const T* eb = reinterpret_cast<const T*>(&wb);
#pragma unroll
        for (int m = 0; m < kRows; ++m) {
          const uint4 xa = *reinterpret_cast<const uint4*>(x0 + static_cast<int64_t>(m) * k + v * kVec);
          const uint4 xb = second ? *reinterpret_cast<const uint4*>(x0 + static_cast<int64_t>(m) * k + (v + 32) * kVec)
                                  : make_uint4(0, 0, 0, 0);
          const T* fa = reinterpret_cast<const T*>(&xa);
          const T* fb = reinterpret_cast<const T*>(&xb);
#pragma unroll
          for (int e = 0; e < kVec; ++e) {
            acc[m] += load_f(ea + e) * load_f(fa + e);
            acc2[m] += load_f(eb + e) * load_f(fb + e);
          }
        }
      }
      if (row_ends) {
        const int q = (r - warp) / kConsumerWarps;
#pragma unroll
        for (int m = 0; m < kRows; ++m) {
          const float total = warp_sum(acc[m] + acc2[m]);
          acc[m] = 0.0f, acc2[m] = 0.0f;
          const float b = __shfl_sync(0xffffffffu, pre_bias, q * kRows + m);
          const float res = __shfl_sync(0xffffffffu, pre_residual, q * kRows + m);
          if (lane == m) {
            float v = decode::round_to<T>(total + b);  // the linear's output, as the unfused path stores it
            if (epilogue == Epilogue::gelu_tanh) v = decode::gelu_tanh(v);
            else if (epilogue == Epilogue::gelu_erf) v = decode::gelu_erf(v);
            else if (epilogue == Epilogue::residual_add) v = res + v;
            store_f(out + static_cast<int64_t>(m) * n_out + row0 + r, v);
          }
        }
      }
    }
    __syncwarp();
    if (ct == 0 && trace_args && c < 8) stamp(*trace_args, trace_l, trace_op, 22 + c);
    if (lane == 0) barrier_arrive(&ring.empty[slot]);
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
};

// What the consumers of a block keep for the whole launch.
template <typename T>
struct Consumers {
  Ring<T> ring;
  const Geometry* g;
  T* xs;
  float (*red)[kConsumerWarps];
  const DecodeStackArgs* a;
};

// The op: the parameters that do not depend on other blocks (LayerNorm weights, the first bias) are
// requested first, then the wait, the input rows, the chunks, the epilogue and the signal.
template <typename T, int kRows>
__device__ TESSERA_STACK_NOINLINE void gemv_op(const GemvJob<T>& job, Consumers<T>& c, int ct) {
  constexpr int kVec = 16 / sizeof(T);
  const DecodeStackArgs& a = *c.a;
  uint4 gamma = make_uint4(0, 0, 0, 0), beta = gamma;
  const bool layernorm = job.ln_weight != nullptr;
  if (layernorm && ct < job.k / kVec) {
    gamma = __ldg(reinterpret_cast<const uint4*>(job.ln_weight) + ct);
    beta = __ldg(reinterpret_cast<const uint4*>(job.ln_bias) + ct);
  }
  float pre_bias = 0.0f;  // lane j: the bias of this warp's row w + W (j / kRows)
  {
    const int q = (ct & 31) / kRows, r = (ct >> 5) + kConsumerWarps * q;
    if (job.bias && q < 32 / kRows && r < job.rows) pre_bias = load_f(job.bias + job.row0 + r);
  }
  if (ct == 0) stamp(a, job.layer, job.op, 0);
  if (job.wait_on) wait_counter(job.wait_on, job.wait_target, ct, a.debug);
  if (!(a.debug & 64)) load_input<T, kRows>(job.in, job.k, layernorm, gamma, beta, a.ln_eps, c.xs, c.red, ct);
  if (ct == 0) stamp(a, job.layer, job.op, 1);
  gemv<T, kRows>(c.ring, *c.g, c.xs, job.row0, job.rows, job.k, job.n_out, pre_bias, job.epilogue, job.residual,
                 job.out, ct, (a.debug & 2) != 0, a.debug, a.trace ? &a : nullptr, job.layer, job.op);
  if (ct == 0) stamp(a, job.layer, job.op, 2);
  if (!(a.debug & 64)) signal_counter(job.signal, 1, ct);
  if (ct == 0) stamp(a, job.layer, job.op, 3);
}

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

// One (sequence m, head h) task over keys 0..past (the new token's from qkv), as the whole-head
// kernel of cached_attention.cu with 512 threads: the cached rows of the first chunk are requested
// before waiting for the QKV op, then the new key and value are appended to the cache and the chunks
// are scanned with an online softmax; the key groups of a warp and the warps merge in fixed order.
template <typename T, int kLanes>
__device__ TESSERA_STACK_NOINLINE void attention_task(const DecodeStackArgs& a, const DecodeStackLayer& layer, const T* qkv, T* context,
                               int m, int h, const uint32_t* qkv_done, uint32_t qkv_target,
                               AttentionShared<kLanes * (16 / sizeof(T))>& sh, int ct) {
  constexpr int kVec = 16 / sizeof(T);
  constexpr int kGroups = kConsumerThreads / kLanes;  // keys per pass
  constexpr int kHn = kLanes * kVec;
  const int64_t hidden = a.hidden, past = *a.past_device, keys = past + 1;
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
      if (cached) live[p] = j < keys && (!mask || mask[j]);
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
  load_chunk(0, true, false);
  wait_counter(qkv_done, qkv_target, ct, a.debug);
  if (ct < kLanes) {  // the new key and value into the cache, for the next steps
    reinterpret_cast<uint4*>(k_rows + past * hidden)[ct] = __ldcg(reinterpret_cast<const uint4*>(q_new + kHn) + ct);
    reinterpret_cast<uint4*>(v_rows + past * hidden)[ct] = __ldcg(reinterpret_cast<const uint4*>(q_new + 2 * kHn) + ct);
  }
  load_chunk(0, false, true);
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
  for (int64_t c0 = 0; c0 < keys; c0 += int64_t(kGroups) * kPasses) {  // uniform over the consumers
    if (c0 > 0) load_chunk(c0, true, true);
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
  for (int d = ct; d < kHn; d += kConsumerThreads) {
    float mm = -INFINITY, l = 0.0f, o = 0.0f;
    for (int w = 0; w < kConsumerWarps; ++w) merge_partial<1>(mm, l, &o, sh.m[w], sh.l[w], &sh.o[w][d]);
    store_f(context + m * hidden + h * kHn + d, l > 0.0f ? o / l : 0.0f);  // no key to attend: a zero row
  }
  consumers_sync();  // sh is reused by the next task
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

// The producer: every GEMV share of every layer, in the consumers' order, chunk by chunk into the ring;
// pt: the producer thread (cp.async: all of them copy every chunk; bulk copies: thread 0 alone).
template <typename T>
__device__ void produce(const DecodeStackArgs& a, const Geometry& g, Ring<T>& ring, int pt) {
  constexpr int kVec = 16 / sizeof(T);
  const int b = blockIdx.x;
  for (int l = 0; l < a.num_layers; ++l) {
    const DecodeStackLayer& layer = a.layers[l];
    for (int i = 0; i < 4; ++i) {
      const int op = i == 0 ? kQkv : i == 1 ? kProj : i == 2 ? kFc1 : kFc2;
      const OpWeights<T> w = op_weights<T>(a, layer, op);
      const int row0 = share_begin(w.n_out, b, g.grid), rows = share_begin(w.n_out, b + 1, g.grid) - row0;
      const Chunks chunks(rows, w.k, sizeof(T), g.slot_bytes, kVec);
      for (int c = 0; c < chunks.count; ++c, ++ring.next) {
        int r0, nr, c0, nc;
        chunks.at(c, rows, w.k, r0, nr, c0, nc);
        const int slot = static_cast<int>(ring.next % ring.count);
        const uint32_t round = ring.next / ring.count;
        if (round > 0) {
          if ((pt & 31) == 0) {
            if (a.debug & 8) barrier_spin(&ring.empty[slot], (round - 1) & 1, "a free ring slot");
            else barrier_wait(&ring.empty[slot], (round - 1) & 1, "a free ring slot");
          }
          __syncwarp(a.copy_mode == 1 ? 1u : 0xffffffffu);
        }
        if (pt == 0 && c == 0) stamp(a, l, op, 4);
        if (pt == 0 && c + 1 == chunks.count) stamp(a, l, op, 5);
        const uint32_t bytes = static_cast<uint32_t>(nr * nc) * sizeof(T);
        unsigned char* dst = ring.slots + static_cast<size_t>(slot) * ring.slot_bytes;
        const T* src = w.weight + static_cast<int64_t>(row0 + r0) * w.k + c0;
        if (a.copy_mode == 1) {
          barrier_expect_bytes(&ring.full[slot], bytes);
          bulk_copy(dst, src, bytes, &ring.full[slot]);
        } else {
          // The chunk's rows are whole (contiguous) or one piece of a row: contiguous either way.
          for (uint32_t i = pt; i < bytes / 16; i += kProducerThreads)
            async_copy16(dst + 16 * i, reinterpret_cast<const unsigned char*>(src) + 16 * i);
          barrier_arrive_on_copies(&ring.full[slot]);
        }
      }
    }
  }
}

template <typename T, int kRows, int kLanes>
__global__ void __launch_bounds__(kThreads, 1) decode_stack_kernel(const __grid_constant__ DecodeStackArgs a, const __grid_constant__ Geometry g) {
  constexpr int kHn = kLanes * (16 / sizeof(T));
  extern __shared__ __align__(128) unsigned char shared[];
  __shared__ uint64_t full[kMaxSlots], empty[kMaxSlots];
  __shared__ float red[kRows][kConsumerWarps];
  __shared__ AttentionShared<kHn> attention_shared;
  __shared__ uint32_t epoch_shared;
  const int ct = threadIdx.x;
  Workspace<T> ws;
  workspace_of<T>(a.workspace, a, ws);
  if (ct == 0) {
    const uint32_t arrivals = a.copy_mode == 1 ? 1 : kProducerThreads;
    for (int s = 0; s < g.slots; ++s) barrier_init(&full[s], arrivals), barrier_init(&empty[s], kConsumerWarps);
    barrier_init_fence();
    epoch_shared = *reinterpret_cast<volatile uint32_t*>(ws.epoch);
  }
  __syncthreads();
  const uint32_t epoch = epoch_shared;
  Ring<T> ring{shared + g.ring_offset, full, empty, g.slots, g.slot_bytes};
  if (ct >= kConsumerThreads) {  // the producer warps
    const int pt = ct - kConsumerThreads;
    if ((a.copy_mode != 1 || pt == 0) && !(a.debug & 32)) produce<T>(a, g, ring, pt);
    return;
  }

  Consumers<T> c{ring, &g, reinterpret_cast<T*>(shared + g.x_offset), red, &a};
  const int b = blockIdx.x, tasks = a.rows * a.heads;
  const uint32_t block_target = (epoch + 1) * static_cast<uint32_t>(g.grid);
  const uint32_t task_target = (epoch + 1) * static_cast<uint32_t>(tasks);
  const Epilogue gelu = a.gelu_erf ? Epilogue::gelu_erf : Epilogue::gelu_tanh;
  for (int l = 0; l < a.num_layers; ++l) {
    const DecodeStackLayer& layer = a.layers[l];
    uint32_t* counter = ws.counters + static_cast<size_t>(l) * kOps * kSyncStride;
    const auto done = [&](int op) { return counter + op * kSyncStride; };
    const T* x_in = l == 0 ? static_cast<const T*>(a.in) : (l & 1) ? ws.x[1] : ws.x[0];
    T* x_out = l + 1 == a.num_layers ? static_cast<T*>(a.out) : (l & 1) ? ws.x[0] : ws.x[1];
    const auto job = [&](int op, const T* in, const T* ln_w, const T* ln_b, const T* bias, Epilogue epilogue,
                         const T* residual, T* out, const uint32_t* wait_on, uint32_t wait_target) {
      const OpWeights<T> w = op_weights<T>(a, layer, op);
      const int row0 = share_begin(w.n_out, b, g.grid), rows = share_begin(w.n_out, b + 1, g.grid) - row0;
      return GemvJob<T>{in, ln_w, ln_b, bias, residual, out, w.k, w.n_out, row0, rows, l, op, epilogue, wait_on,
                        wait_target, done(op)};
    };
    // [LN1 + QKV] after the previous layer's fc2 (the first layer's input is the launch's).
    const uint32_t* previous = l > 0 ? ws.counters + (static_cast<size_t>(l - 1) * kOps + kFc2) * kSyncStride : nullptr;
    gemv_op<T, kRows>(job(kQkv, x_in, static_cast<const T*>(layer.ln1_weight), static_cast<const T*>(layer.ln1_bias),
                          static_cast<const T*>(layer.qkv_bias), Epilogue::none, nullptr, ws.qkv, previous, block_target),
                      c, ct);
    // Attention: tasks t with t * grid / tasks == b.
    if (ct == 0) stamp(a, l, kAttention, 0);
    uint32_t mine = 0;
    for (int t = static_cast<int>((static_cast<int64_t>(b) * tasks + g.grid - 1) / g.grid); t < tasks && !(a.debug & 64); ++t) {
      if (static_cast<int64_t>(t) * g.grid / tasks != b) break;
      attention_task<T, kLanes>(a, layer, ws.qkv, ws.context, t / a.heads, t % a.heads, done(kQkv), block_target,
                                attention_shared, ct);
      ++mine;
    }
    if (ct == 0) stamp(a, l, kAttention, 2);
    signal_counter(done(kAttention), mine, ct);
    if (ct == 0) stamp(a, l, kAttention, 3);
    // [proj + residual] after every attention task; [LN2 + fc1 + GeLU]; [fc2 + residual].
    gemv_op<T, kRows>(job(kProj, ws.context, nullptr, nullptr, static_cast<const T*>(layer.proj_bias),
                          Epilogue::residual_add, x_in, ws.h, done(kAttention), task_target),
                      c, ct);
    gemv_op<T, kRows>(job(kFc1, ws.h, static_cast<const T*>(layer.ln2_weight), static_cast<const T*>(layer.ln2_bias),
                          static_cast<const T*>(layer.fc1_bias), gelu, nullptr, ws.activation, done(kProj),
                          block_target),
                      c, ct);
    gemv_op<T, kRows>(job(kFc2, ws.activation, nullptr, nullptr, static_cast<const T*>(layer.fc2_bias),
                          Epilogue::residual_add, ws.h, x_out, done(kFc1), block_target),
                      c, ct);
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
constexpr size_t kStaticShared = 16 * 1024;

int gcd_int(int a, int b) { return b == 0 ? a : gcd_int(b, a % b); }

// The geometry of a launch, or slots == 0 when the shape does not fit.
Geometry geometry_of(size_t esize, const DecodeStackArgs& a) {
  Geometry g{};
  g.grid = sm_count();
  const int widest = std::max({3 * a.hidden, a.ffn, a.hidden});
  g.max_block_rows = (widest + g.grid - 1) / g.grid;
  g.x_elems = std::max(a.hidden, a.ffn);
  g.x_offset = 0;
  g.ring_offset = align_up(g.x_offset + static_cast<size_t>(a.rows) * g.x_elems * esize, 128);
  // Slots: a common multiple of the two row lengths when it fits 16 KiB (no slot space idles), else 16 KiB.
  const int r1 = a.hidden * static_cast<int>(esize), r2 = a.ffn * static_cast<int>(esize);
  const int64_t lcm = static_cast<int64_t>(r1) / gcd_int(r1, r2) * r2;
  g.slot_bytes = lcm <= kMaxSlotBytes ? static_cast<int>(lcm * (kMaxSlotBytes / lcm)) : kMaxSlotBytes;
  if (a.slot_bytes > 0) g.slot_bytes = a.slot_bytes;
  const int64_t budget = static_cast<int64_t>(max_shared_per_block()) - static_cast<int64_t>(kStaticShared) -
                         static_cast<int64_t>(g.ring_offset);
  g.slots = static_cast<int>(std::min<int64_t>(kMaxSlots, budget / g.slot_bytes));
  if (a.slots > 0) g.slots = std::min(g.slots, a.slots);
  if (g.slots < 2) g.slots = 0;
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
  return dtype_size(t) == 2 ? workspace_of<__half>(nullptr, a, halves) : workspace_of<float>(nullptr, a, floats);
}

bool decode_stack_applies(DType t, const DecodeStackArgs& a) {
  if (!(t == DType::bf16 || t == DType::f16)) return false;
  if (a.rows < 1 || a.rows > kDecodeStackMaxRows || a.num_layers < 1) return false;
  if (!(a.head_dim == 64 || a.head_dim == 128) || a.heads * a.head_dim != a.hidden) return false;
  if (a.hidden % 8 != 0 || a.hidden > kConsumerThreads * 8 || a.ffn % 8 != 0 || a.ffn < 8 || !a.past_device) return false;
  int device = 0, major = 0;
  TESSERA_CUDA_CHECK(cudaGetDevice(&device));
  TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  if (major < 9) return false;
  const Geometry g = geometry_of(dtype_size(t), a);
  // A warp's lanes hold the bias and residual of its rows, one lane a (row, sequence).
  return g.slots > 0 && g.max_block_rows <= kConsumerWarps * (32 / a.rows);
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
