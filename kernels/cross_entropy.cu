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
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t p = base + int64_t(u) * kThreads;
      if (p < packs) raw[u] = xv[p];
    }
    // Full chunks (all but at most one per thread) skip the padding test; the values are unpacked
    // from the raw registers in each pass rather than held as kUnroll x N floats.
    const bool full = (base + int64_t(kUnroll - 1) * kThreads + 1) * N <= valid_vocab;
    auto value = [&](int u, int k) {
      const int64_t j = (base + int64_t(u) * kThreads) * N + k;
      return full || j < valid_vocab ? load_f(&raw[u].e[k]) : -INFINITY;
    };
    float local_max = -INFINITY;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int k = 0; k < N; ++k) local_max = fmaxf(local_max, value(u, k));
    if (local_max == -INFINITY) continue;
    const float m = fmaxf(acc.m, local_max);
    const float m2 = m * kLog2e;
    float s = acc.s * exp2f_approx(fmaf(acc.m, kLog2e, -m2));  // acc.m = -inf: 0 * 0
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int k = 0; k < N; ++k) s += exp2f_approx(fmaf(value(u, k), kLog2e, -m2));
    acc = {m, s};
  }
  acc = warp_merge(acc);
  __shared__ float part_m[kThreads / 32], part_s[kThreads / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) part_m[warp] = acc.m, part_s[warp] = acc.s;
  __syncthreads();
  if (warp == 0) {
    MaxSum r = lane < kThreads / 32 ? MaxSum{part_m[lane], part_s[lane]} : MaxSum{-INFINITY, 0.0f};
    r = warp_merge(r);
    if (lane == 0) {
      const float lse = r.m + logf(r.s);
      const int32_t target = targets[row];
      store_f(log_sum_exp + row, lse);
      store_f(losses + row, target >= 0 && target < valid_vocab ? lse - load_f(x + target) : NAN);
    }
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
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t p = base + int64_t(u) * kThreads;
      if (p < packs) raw[u] = xv[p];
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t p = base + int64_t(u) * kThreads;
      if (p >= packs) continue;
      float v[N];
      unpack<T, N>(raw[u], v);
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
      P out;
#pragma unroll
      for (int k = 0; k < N; ++k) store_f(&out.e[k], g[k]);
      dv[p] = out;
    }
  }
}

template <typename T>
bool vectorizable(const void* a, const void* b, int64_t vocab) {
  return (vocab * static_cast<int64_t>(sizeof(T))) % 16 == 0 && reinterpret_cast<uintptr_t>(a) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(b) % 16 == 0;
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

}  // namespace tessera::kernels
