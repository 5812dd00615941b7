// Cross entropy fused with the softmax over the first valid_vocab columns (the rest is vocabulary
// padding): one block per token row. The forward reads the row ONCE with an online max / sum-exp
// (each thread keeps a running (max, sum) rescaled when the max grows, merged across the block at
// the end); the backward writes softmax - onehot, and may run in place (dlogits == logits: each
// element's gradient depends only on itself, the row's lse and dloss). Rows whose byte length and
// base are 16-byte aligned move 16-byte vectors, kUnroll per thread in flight; others take the
// same code with one element per "vector".
#include <algorithm>
#include <cstdint>

#include "kernels/common.cuh"
#include "kernels/kernels.h"
#include "kernels/vec16.cuh"

namespace tessera::kernels {

namespace {

constexpr int kThreads = 512;
constexpr int kUnroll = 4;  // vectors each thread loads before using any (memory-level parallelism)

// N elements of T moved as one aligned unit (16 bytes when vectorised, one element otherwise).
template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T e[N];
};

template <typename T, int N>
__device__ __forceinline__ void unpack(const Pack<T, N>& p, float* out) {
#pragma unroll
  for (int k = 0; k < N; ++k) out[k] = load_f(&p.e[k]);
}

constexpr float kLog2e = 1.4426950408889634f;

// 2^x with the hardware approximation (what __expf uses after its multiply by log2 e).
__device__ __forceinline__ float exp2f_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Online softmax statistics: m = running max, s = sum exp(x - m).
struct MaxSum {
  float m, s;
};

__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return {m, 0.0f};
  return {m, a.s * __expf(a.m - m) + b.s * __expf(b.m - m)};
}

__device__ __forceinline__ MaxSum warp_merge(MaxSum v) {
  for (int o = 16; o > 0; o >>= 1) {
    MaxSum other{__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.s, o)};
    v = merge(v, other);
  }
  return v;
}

// Folds kUnroll packs (pack p = base + u * kThreads) into a thread's online (max, sum-exp); columns
// >= valid_vocab and packs >= packs do not count.
template <typename T, int N>
__device__ __forceinline__ MaxSum online_update(const Pack<T, N> (&raw)[kUnroll], int64_t base, int64_t packs,
                                                int64_t valid_vocab, MaxSum acc) {
  // Full chunks (all but at most one per thread) skip the padding test; the values are unpacked
  // from the raw registers in each pass rather than held as kUnroll x N floats.
  const bool full = (base + int64_t(kUnroll - 1) * kThreads + 1) * N <= valid_vocab;
  auto value = [&](int u, int k) {
    const int64_t p = base + int64_t(u) * kThreads, j = p * N + k;
    return full || (p < packs && j < valid_vocab) ? load_f(&raw[u].e[k]) : -INFINITY;
  };
  float local_max = -INFINITY;
#pragma unroll
  for (int u = 0; u < kUnroll; ++u)
#pragma unroll
    for (int k = 0; k < N; ++k) local_max = fmaxf(local_max, value(u, k));
  if (local_max == -INFINITY) return acc;
  const float m = fmaxf(acc.m, local_max);
  const float m2 = m * kLog2e;
  float s = acc.s * exp2f_approx(fmaf(acc.m, kLog2e, -m2));  // acc.m = -inf: 0 * 0
#pragma unroll
  for (int u = 0; u < kUnroll; ++u)
#pragma unroll
    for (int k = 0; k < N; ++k) s += exp2f_approx(fmaf(value(u, k), kLog2e, -m2));
  return {m, s};
}

// Loads packs base + u * kThreads (those < packs) of a row, all requested before any is used.
template <typename T, int N>
__device__ __forceinline__ void load_group(const Pack<T, N>* xv, int64_t base, int64_t packs,
                                           Pack<T, N> (&raw)[kUnroll]) {
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t p = base + int64_t(u) * kThreads;
    if (p < packs) raw[u] = xv[p];
  }
}

// The block's online (max, sum-exp), merged in a fixed order, returned to every thread.
__device__ __forceinline__ MaxSum block_merge(MaxSum acc) {
  __shared__ float part_m[kThreads / 32], part_s[kThreads / 32];
  acc = warp_merge(acc);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) part_m[warp] = acc.m, part_s[warp] = acc.s;
  __syncthreads();
  return warp_merge(lane < kThreads / 32 ? MaxSum{part_m[lane], part_s[lane]} : MaxSum{-INFINITY, 0.0f});
}

// The gradient of pack p: dl * (softmax - onehot(target)), zero on padding columns.
template <typename T, int N>
__device__ __forceinline__ Pack<T, N> gradient_pack(const Pack<T, N>& x, int64_t p, int64_t target,
                                                    int64_t valid_vocab, float dl, float lse2) {
  float v[N];
  unpack<T, N>(x, v);
  float g[N];
#pragma unroll
  for (int k = 0; k < N; ++k) g[k] = dl * exp2f_approx(fmaf(v[k], kLog2e, -lse2));
  if (target >= p * N && target < p * N + N) {  // the one-hot (register index stays static)
#pragma unroll
    for (int k = 0; k < N; ++k)
      if (p * N + k == target) g[k] -= dl;
  }
  if ((p + 1) * N > valid_vocab) {  // padding columns get zero gradient
#pragma unroll
    for (int k = 0; k < N; ++k)
      if (p * N + k >= valid_vocab) g[k] = 0.0f;
  }
  Pack<T, N> out;
#pragma unroll
  for (int k = 0; k < N; ++k) store_f(&out.e[k], g[k]);
  return out;
}

template <typename T, int N, typename L>
__global__ void __launch_bounds__(kThreads, 2) cross_entropy_forward_kernel(const T* __restrict__ logits,
                                                                         const int32_t* __restrict__ targets,
                                                                         int64_t vocab, int64_t valid_vocab,
                                                                         L* __restrict__ losses,
                                                                         L* __restrict__ log_sum_exp) {
  using P = Pack<T, N>;
  const int64_t row = blockIdx.x;
  const T* x = logits + row * vocab;
  const P* xv = reinterpret_cast<const P*>(x);
  const int64_t packs = (valid_vocab + N - 1) / N;  // the last may hold padding columns
  MaxSum acc{-INFINITY, 0.0f};
  for (int64_t base = threadIdx.x; base < packs; base += int64_t(kThreads) * kUnroll) {
    P raw[kUnroll];
    load_group<T, N>(xv, base, packs, raw);
    acc = online_update<T, N>(raw, base, packs, valid_vocab, acc);
  }
  acc = block_merge(acc);
  if (threadIdx.x == 0) {
    const float lse = acc.m + logf(acc.s);
    const int32_t target = targets[row];
    store_f(log_sum_exp + row, lse);
    store_f(losses + row, target >= 0 && target < valid_vocab ? lse - load_f(x + target) : NAN);
  }
}

// No __restrict__ on logits / dlogits: they may be the same buffer. Each thread loads its kUnroll
// packs before storing any, and a pack is read and written by the same thread only.
template <typename T, int N, typename L>
__global__ void __launch_bounds__(kThreads, 2) cross_entropy_backward_kernel(const T* logits, const int32_t* targets,
                                                                          const L* log_sum_exp, const L* dlosses,
                                                                          int64_t vocab, int64_t valid_vocab,
                                                                          T* dlogits) {
  using P = Pack<T, N>;
  const int64_t row = blockIdx.x;
  const P* xv = reinterpret_cast<const P*>(logits + row * vocab);
  P* dv = reinterpret_cast<P*>(dlogits + row * vocab);
  const float lse = load_f(log_sum_exp + row), dl = load_f(dlosses + row);
  const int64_t target = targets[row];
  const float lse2 = lse * kLog2e;
  const int64_t packs = vocab / N;
  for (int64_t base = threadIdx.x; base < packs; base += int64_t(kThreads) * kUnroll) {
    P raw[kUnroll];
    load_group<T, N>(xv, base, packs, raw);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t p = base + int64_t(u) * kThreads;
      if (p < packs) dv[p] = gradient_pack<T, N>(raw[u], p, target, valid_vocab, dl, lse2);
    }
  }
}

// Forward and backward of a training step in one pass (the output layer's chunks, GPTModel::
// chunk_loss): each thread copies the 16-byte vectors it loads into the block's row in shared
// memory while folding them into its online (max, sum-exp), the block merges those, writes the loss
// and log-sum-exp, then each thread writes the gradient of the vectors it copied (no barrier needed
// for the row: a thread reads back its own vectors). Each logit is read from global memory once and
// its gradient written once (the separate kernels read it twice). Two blocks per SM while a row fits
// twice in shared memory (bf16 / f16 rows up to ~56K columns), so one block's loads overlap the
// other's arithmetic and stores. dlogits may be logits: the target's logit is read before the
// block's first barrier and every other element by the thread that writes it.
constexpr int64_t kFusedMaxRowBytes = 200 * 1024;

template <typename T, typename L>
__global__ void __launch_bounds__(kThreads, 2)
    cross_entropy_fused_kernel(const T* logits, const int32_t* __restrict__ targets, const L* __restrict__ dlosses,
                               int64_t vocab, int64_t valid_vocab, L* __restrict__ losses,
                               L* __restrict__ log_sum_exp, T* dlogits) {
  constexpr int N = 16 / static_cast<int>(sizeof(T));
  using P = Pack<T, N>;
  extern __shared__ __align__(16) unsigned char row_bytes[];
  P* row_copy = reinterpret_cast<P*>(row_bytes);
  const int64_t row = blockIdx.x;
  const P* xv = reinterpret_cast<const P*>(logits + row * vocab);
  P* dv = reinterpret_cast<P*>(dlogits + row * vocab);
  const int64_t packs = vocab / N;
  const int64_t target = targets[row];
  const bool has_target = target >= 0 && target < valid_vocab;
  float target_logit = 0.0f;
  if (threadIdx.x == 0 && has_target) target_logit = load_f(logits + row * vocab + target);
  MaxSum acc{-INFINITY, 0.0f};
  for (int64_t base = threadIdx.x; base < packs; base += int64_t(kThreads) * kUnroll) {
    P raw[kUnroll];
    load_group<T, N>(xv, base, packs, raw);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t p = base + int64_t(u) * kThreads;
      if (p < packs) row_copy[p] = raw[u];
    }
    acc = online_update<T, N>(raw, base, packs, valid_vocab, acc);
  }
  acc = block_merge(acc);
  const float lse = acc.m + logf(acc.s);
  if (threadIdx.x == 0) {
    store_f(log_sum_exp + row, lse);
    store_f(losses + row, has_target ? lse - target_logit : NAN);
  }
  const float dl = load_f(dlosses + row), lse2 = lse * kLog2e;
  for (int64_t p = threadIdx.x; p < packs; p += kThreads)
    dv[p] = gradient_pack<T, N>(row_copy[p], p, target, valid_vocab, dl, lse2);
}

template <typename T>
bool vectorizable(const void* a, const void* b, int64_t vocab) {
  return (vocab * static_cast<int64_t>(sizeof(T))) % 16 == 0 && aligned16(a) && aligned16(b);
}

}  // namespace

void cross_entropy_forward(DType t, const void* logits, const int32_t* targets, int64_t n, int64_t vocab,
                           int64_t valid_vocab, DType loss_t, void* losses, void* log_sum_exp, cudaStream_t s) {
  if (n == 0) return;
  TESSERA_DEVICE_FLOAT_SWITCH(t, T, TESSERA_DEVICE_FLOAT_SWITCH(loss_t, L, {
    constexpr int kVec = 16 / static_cast<int>(sizeof(T));
    if (vectorizable<T>(logits, logits, vocab))
      cross_entropy_forward_kernel<T, kVec, L><<<static_cast<unsigned>(n), kThreads, 0, s>>>(
          static_cast<const T*>(logits), targets, vocab, valid_vocab, static_cast<L*>(losses),
          static_cast<L*>(log_sum_exp));
    else
      cross_entropy_forward_kernel<T, 1, L><<<static_cast<unsigned>(n), kThreads, 0, s>>>(
          static_cast<const T*>(logits), targets, vocab, valid_vocab, static_cast<L*>(losses),
          static_cast<L*>(log_sum_exp));
  }));
  TESSERA_KERNEL_LAUNCH_CHECK();
}

void cross_entropy_backward(DType t, const void* logits, const int32_t* targets, DType loss_t, const void* log_sum_exp,
                            const void* dlosses, int64_t n, int64_t vocab, int64_t valid_vocab, void* dlogits,
                            cudaStream_t s) {
  if (n == 0) return;
  TESSERA_DEVICE_FLOAT_SWITCH(t, T, TESSERA_DEVICE_FLOAT_SWITCH(loss_t, L, {
    constexpr int kVec = 16 / static_cast<int>(sizeof(T));
    if (vectorizable<T>(logits, dlogits, vocab))
      cross_entropy_backward_kernel<T, kVec, L><<<static_cast<unsigned>(n), kThreads, 0, s>>>(
          static_cast<const T*>(logits), targets, static_cast<const L*>(log_sum_exp), static_cast<const L*>(dlosses),
          vocab, valid_vocab, static_cast<T*>(dlogits));
    else
      cross_entropy_backward_kernel<T, 1, L><<<static_cast<unsigned>(n), kThreads, 0, s>>>(
          static_cast<const T*>(logits), targets, static_cast<const L*>(log_sum_exp), static_cast<const L*>(dlosses),
          vocab, valid_vocab, static_cast<T*>(dlogits));
  }));
  TESSERA_KERNEL_LAUNCH_CHECK();
}

bool cross_entropy_fused_supported(DType t, const void* logits, const void* dlogits, int64_t vocab) {
  if (t != DType::bf16 && t != DType::f16) return false;
  return vectorizable<uint16_t>(logits, dlogits, vocab) && vocab * 2 <= kFusedMaxRowBytes;
}

void cross_entropy_fused(DType t, const void* logits, const int32_t* targets, DType loss_t, const void* dlosses,
                         int64_t n, int64_t vocab, int64_t valid_vocab, void* losses, void* log_sum_exp, void* dlogits,
                         cudaStream_t s) {
  if (n == 0) return;
  TESSERA_CHECK(cross_entropy_fused_supported(t, logits, dlogits, vocab),
                "cross_entropy_fused: unsupported logits (bf16 / f16, 16-byte aligned rows of at most ",
                kFusedMaxRowBytes / 2, " columns)");
  const size_t smem = static_cast<size_t>(vocab) * 2;
  auto launch = [&](auto t_tag, auto l_tag) {
    using T = decltype(t_tag);
    using L = decltype(l_tag);
    static const bool configured = [] {  // once: the largest row the kernel takes
      TESSERA_CUDA_CHECK(cudaFuncSetAttribute(cross_entropy_fused_kernel<T, L>,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              static_cast<int>(kFusedMaxRowBytes)));
      return true;
    }();
    (void)configured;
    cross_entropy_fused_kernel<T, L><<<static_cast<unsigned>(n), kThreads, smem, s>>>(
        static_cast<const T*>(logits), targets, static_cast<const L*>(dlosses), vocab, valid_vocab,
        static_cast<L*>(losses), static_cast<L*>(log_sum_exp), static_cast<T*>(dlogits));
  };
  TESSERA_DEVICE_FLOAT_SWITCH(loss_t, L, {
    if (t == DType::bf16) launch(__nv_bfloat16{}, L{});
    else launch(__half{}, L{});
  });
  TESSERA_KERNEL_LAUNCH_CHECK();
}

}  // namespace tessera::kernels
