// Fused decode linear (decode_linear.h): skinny_linear.cu's GEMV (warps stream weight rows with
// 16-byte loads, a long row split over up to eight warps, fp32 accumulation, warp-shuffle sums) with
// (1) the first weight loads (and the LayerNorm parameters) issued before
// cudaGridDependencySynchronize, so under programmatic dependent launch they overlap the previous
// kernel's tail; (2) an optional LayerNorm prologue: every block normalises the input rows into
// shared memory (one load per element, block-wide two-pass fp32 statistics, output rounded to the
// dtype; one wave of blocks loops over the output rows, so each block does this once) and the GEMV
// reads the rows from there; (3) an
// epilogue after bias (rounded to the dtype as the unfused linear's output): GeLU (tanh or erf,
// rounded again) or a residual add. Each step rounds where the unfused kernels round, so the fused
// layer equals the unfused one up to fp32 summation order.
#include <algorithm>
#include <map>
#include <mutex>
#include <utility>

#include "kernels/common.cuh"
#include "kernels/decode_linear.h"
#include "kernels/kernels.h"
#include "kernels/programmatic_launch.cuh"

namespace tessera::kernels {

namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kUnroll = 8;  // 16-byte weight loads in flight per lane
constexpr size_t kMaxLnShared = 48 * 1024;
constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2 / pi)

template <typename T>
__device__ __forceinline__ float round_to(float v) {
  T t;
  store_f(&t, v);
  return load_f(&t);
}

template <typename T>
__device__ __forceinline__ void unpack(const uint4& raw, float* out) {
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int k = 0; k < 16 / static_cast<int>(sizeof(T)); ++k) out[k] = load_f(e + k);
}

// The block normalises the kRows input rows into xs (both [kRows, k], k <= 256 * kVec): thread t
// holds vector t of every row (one load of the row set), block-wide fp32 sums through red_* for the
// mean, then for the variance of the held values (two-pass statistics without a second load).
template <typename T, int kRows>
__device__ __forceinline__ void layernorm_block(const T* in, const uint4& gamma, const uint4& beta, float eps,
                                                int64_t k, T* xs, float (*red_sum)[kWarpsPerBlock],
                                                float (*red_sq)[kWarpsPerBlock]) {
  constexpr int kVec = 16 / sizeof(T);
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const bool holds = t < k / kVec;
  uint4 raw[kRows];
#pragma unroll
  for (int m = 0; m < kRows; ++m)
    if (holds) raw[m] = *reinterpret_cast<const uint4*>(in + m * k + t * kVec);
  float mean[kRows], rstd[kRows];
#pragma unroll
  for (int m = 0; m < kRows; ++m) {
    float f[kVec], sum = 0.0f;
    if (holds) {
      unpack<T>(raw[m], f);
#pragma unroll
      for (int e = 0; e < kVec; ++e) sum += f[e];
    }
    sum = warp_sum(sum);
    if (lane == 0) red_sum[m][warp] = sum;
  }
  __syncthreads();
#pragma unroll
  for (int m = 0; m < kRows; ++m) {
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarpsPerBlock; ++w) total += red_sum[m][w];
    mean[m] = total / static_cast<float>(k);
    float f[kVec], sq = 0.0f;
    if (holds) {
      unpack<T>(raw[m], f);
#pragma unroll
      for (int e = 0; e < kVec; ++e) sq += (f[e] - mean[m]) * (f[e] - mean[m]);
    }
    sq = warp_sum(sq);
    if (lane == 0) red_sq[m][warp] = sq;
  }
  __syncthreads();
  float g[kVec], b[kVec];
  unpack<T>(gamma, g);
  unpack<T>(beta, b);
#pragma unroll
  for (int m = 0; m < kRows; ++m) {
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarpsPerBlock; ++w) total += red_sq[m][w];
    rstd[m] = rsqrtf(total / static_cast<float>(k) + eps);
    if (holds) {
      float f[kVec];
      unpack<T>(raw[m], f);
      uint4 packed;
      T* p = reinterpret_cast<T*>(&packed);
#pragma unroll
      for (int e = 0; e < kVec; ++e) store_f(p + e, (f[e] - mean[m]) * rstd[m] * g[e] + b[e]);
      *reinterpret_cast<uint4*>(xs + m * k + t * kVec) = packed;
    }
  }
}

// Blocks loop over groups of output rows (grid-stride; with a LayerNorm the grid is one wave, so each
// block normalises the input once). In a group, warp w takes output n = group * (8 / split) + w / split
// and the K part w % split of it; the parts are summed in part order through shared memory
// (skinny_linear.cu's scheme). The next group's first weight loads are issued before this group's
// reduction and epilogue.
template <typename T, int kRows, bool kLayerNorm>
__global__ void __launch_bounds__(32 * kWarpsPerBlock)
    decode_linear_kernel(const T* in, const T* ln_weight, const T* ln_bias, float ln_eps, const T* weight,
                         const T* bias, int epilogue, const T* residual, int64_t n_out, int64_t k_in, int split,
                         T* out) {
  constexpr int kVec = 16 / sizeof(T);
  extern __shared__ __align__(16) unsigned char dynamic_shared[];
  __shared__ float partial[kWarpsPerBlock][kRows];
  __shared__ float red_sum[kLayerNorm ? kRows : 1][kWarpsPerBlock], red_sq[kLayerNorm ? kRows : 1][kWarpsPerBlock];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t rows_per_group = kWarpsPerBlock / split;
  const int64_t groups = (n_out + rows_per_group - 1) / rows_per_group;
  const int part = warp % split;
  const int64_t step = 32 * kVec;
  const int64_t vectors = k_in / kVec, per_part = (vectors + split - 1) / split;
  const int64_t k_begin = part * per_part * kVec, k_end = min(k_in, (part + 1) * per_part * kVec);
  const int64_t k_first = k_begin + lane * kVec;
  int64_t group = blockIdx.x;
  // The weights (and LayerNorm parameters) do not depend on the previous kernel: start streaming
  // them before waiting for it.
  uint4 wv[kUnroll];
  {
    const int64_t n = group * rows_per_group + warp / split;
    if (n < n_out) {
      const T* w = weight + n * k_in;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        if (k_first + u * step < k_end) wv[u] = __ldg(reinterpret_cast<const uint4*>(w + k_first + u * step));
    }
  }
  uint4 gamma = make_uint4(0, 0, 0, 0), beta = gamma;
  if constexpr (kLayerNorm) {
    if (threadIdx.x < vectors) {
      gamma = __ldg(reinterpret_cast<const uint4*>(ln_weight) + threadIdx.x);
      beta = __ldg(reinterpret_cast<const uint4*>(ln_bias) + threadIdx.x);
    }
  }
  wait_for_previous_grid();
  let_next_grid_launch();
  const T* x = in;
  if constexpr (kLayerNorm) {
    T* xs = reinterpret_cast<T*>(dynamic_shared);
    layernorm_block<T, kRows>(in, gamma, beta, ln_eps, k_in, xs, red_sum, red_sq);
    __syncthreads();
    x = xs;
  }
  for (; group < groups; group += gridDim.x) {
    const int64_t n = group * rows_per_group + warp / split;
    float acc[kRows];
#pragma unroll
    for (int m = 0; m < kRows; ++m) acc[m] = 0.0f;
    if (n < n_out) {
      const T* w = weight + n * k_in;
      for (int64_t k0 = k_first; k0 < k_end; k0 += kUnroll * step) {
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          if (k0 + u * step >= k_end) break;
          const T* we = reinterpret_cast<const T*>(&wv[u]);
#pragma unroll
          for (int m = 0; m < kRows; ++m) {
            const uint4 xv = *reinterpret_cast<const uint4*>(x + m * k_in + k0 + u * step);
            const T* xe = reinterpret_cast<const T*>(&xv);
#pragma unroll
            for (int e = 0; e < kVec; ++e) acc[m] += load_f(we + e) * load_f(xe + e);
          }
        }
        const int64_t next = k0 + kUnroll * step;  // rows longer than one pass: load the next one
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
          if (next + u * step < k_end) wv[u] = __ldg(reinterpret_cast<const uint4*>(w + next + u * step));
      }
    }
    {  // the next group's first pass
      const int64_t next_n = (group + gridDim.x) * rows_per_group + warp / split;
      if (group + gridDim.x < groups && next_n < n_out) {
        const T* w = weight + next_n * k_in;
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
          if (k_first + u * step < k_end) wv[u] = __ldg(reinterpret_cast<const uint4*>(w + k_first + u * step));
      }
    }
#pragma unroll
    for (int m = 0; m < kRows; ++m) acc[m] = warp_sum(acc[m]);
    if (lane == 0)
#pragma unroll
      for (int m = 0; m < kRows; ++m) partial[warp][m] = acc[m];
    __syncthreads();
    if (lane == 0 && part == 0 && n < n_out) {
      const float b = bias ? load_f(bias + n) : 0.0f;
#pragma unroll
      for (int m = 0; m < kRows; ++m) {
        float total = 0.0f;
        for (int p = 0; p < split; ++p) total += partial[warp + p][m];
        float v = round_to<T>(total + b);  // the linear's output, as the unfused path stores it
        if (epilogue == static_cast<int>(DecodeEpilogue::gelu_tanh)) {
          v = 0.5f * v * (1.0f + tanhf(kGeluK * (v + 0.044715f * v * v * v)));
        } else if (epilogue == static_cast<int>(DecodeEpilogue::gelu_erf)) {
          v = 0.5f * v * (1.0f + erff(v * 0.7071067811865476f));
        } else if (epilogue == static_cast<int>(DecodeEpilogue::residual_add)) {
          v = load_f(residual + m * n_out + n) + v;
        }
        store_f(out + m * n_out + n, v);
      }
    }
    __syncthreads();  // partial is rewritten by the next group
  }
}

// Warps per output row: enough that each lane reads at most kUnroll vectors of it (1, 2, 4 or 8).
int split_for(int64_t k_in, int64_t vec) {
  int split = 1;
  while (split < kWarpsPerBlock && k_in > split * 32 * vec * kUnroll) split *= 2;
  return split;
}

// Blocks of the kernel resident at once per SM, and the SM count.
std::pair<int, int> occupancy(const void* kernel, size_t shared_bytes) {
  static std::mutex mutex;
  static std::map<std::pair<const void*, size_t>, std::pair<int, int>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_pair(kernel, shared_bytes);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  int device = 0, sms = 0, per_sm = 0;
  TESSERA_CUDA_CHECK(cudaGetDevice(&device));
  TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  TESSERA_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 32 * kWarpsPerBlock, shared_bytes));
  const auto result = std::make_pair(std::max(1, per_sm), std::max(1, sms));
  cache[key] = result;
  return result;
}

template <typename T, int kRows, bool kLayerNorm>
void launch(const DecodeLinearArgs& a, cudaStream_t s) {
  const int split = split_for(a.k_in, 16 / sizeof(T));
  const int64_t rows_per_group = kWarpsPerBlock / split;
  const int64_t groups = (a.n_out + rows_per_group - 1) / rows_per_group;
  const auto kernel = decode_linear_kernel<T, kRows, kLayerNorm>;
  const size_t shared_bytes = kLayerNorm ? static_cast<size_t>(kRows * a.k_in) * sizeof(T) : 0;
  // Blocks loop over the groups in one wave (default: as many blocks as fit on the GPU at once): with
  // a LayerNorm prologue each block normalises the input once, not once per group, and no block
  // waits for a second wave. On the H200 at the GPT-2 1.5B shape, batch 1, one full wave measured
  // 532 new tokens/s, one block per group 514, half a wave 493 (docs/decode-gpu.md).
  // blocks_per_sm 0: one block per group (no LayerNorm: as skinny_linear.cu; with one: one wave).
  const auto [per_sm, sms] = occupancy(reinterpret_cast<const void*>(kernel), shared_bytes);
  const int64_t wave = static_cast<int64_t>(sms) * (a.blocks_per_sm > 0 ? std::min(a.blocks_per_sm, per_sm) : per_sm);
  const int64_t blocks = a.blocks_per_sm == 0 && !kLayerNorm ? groups : std::min<int64_t>(groups, wave);
  launch_kernel(a.programmatic, kernel, dim3(static_cast<unsigned>(blocks)), dim3(32 * kWarpsPerBlock), shared_bytes,
                s, static_cast<const T*>(a.in), static_cast<const T*>(a.ln_weight),
                static_cast<const T*>(a.ln_bias), a.ln_eps, static_cast<const T*>(a.weight),
                static_cast<const T*>(a.bias), static_cast<int>(a.epilogue), static_cast<const T*>(a.residual), a.n_out,
                a.k_in, split, static_cast<T*>(a.out));
}

template <typename T, bool kLayerNorm>
void launch_rows(const DecodeLinearArgs& a, cudaStream_t s) {
  switch (a.rows) {
    case 1: launch<T, 1, kLayerNorm>(a, s); break;
    case 2: launch<T, 2, kLayerNorm>(a, s); break;
    case 3: launch<T, 3, kLayerNorm>(a, s); break;
    case 4: launch<T, 4, kLayerNorm>(a, s); break;
    case 5: launch<T, 5, kLayerNorm>(a, s); break;
    case 6: launch<T, 6, kLayerNorm>(a, s); break;
    case 7: launch<T, 7, kLayerNorm>(a, s); break;
    case 8: launch<T, 8, kLayerNorm>(a, s); break;
    default: TESSERA_FAIL("decode_linear_forward: rows ", a.rows, " outside 1..", kSkinnyMaxRows);
  }
}

template <typename T>
void launch_type(const DecodeLinearArgs& a, cudaStream_t s) {
  if (a.ln_weight) launch_rows<T, true>(a, s);
  else launch_rows<T, false>(a, s);
}

}  // namespace

bool decode_linear_applies(DType t, const DecodeLinearArgs& a) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (!((t == DType::bf16 || t == DType::f16) && a.rows >= 1 && a.rows <= kSkinnyMaxRows && a.rows <= kWarpsPerBlock &&
        a.k_in % 8 == 0 && a.n_out >= 1 && aligned(a.in) && aligned(a.weight)))
    return false;
  if (a.epilogue == DecodeEpilogue::residual_add && !a.residual) return false;
  if (!a.ln_weight) return true;
  // The LayerNorm prologue: one 16-byte vector of each row per thread.
  return a.ln_bias && aligned(a.ln_weight) && aligned(a.ln_bias) && a.k_in <= 32 * kWarpsPerBlock * 8 &&
         static_cast<size_t>(a.rows * a.k_in) * dtype_size(t) <= kMaxLnShared;
}

void decode_linear_forward(DType t, const DecodeLinearArgs& a, cudaStream_t s) {
  TESSERA_CHECK(decode_linear_applies(t, a), "decode_linear_forward: shape, dtype or alignment it does not take (",
                dtype_name(t), ", rows ", a.rows, ", k_in ", a.k_in, ")");
  if (t == DType::bf16) launch_type<__nv_bfloat16>(a, s);
  else launch_type<__half>(a, s);
  TESSERA_KERNEL_LAUNCH_CHECK();
}

}  // namespace tessera::kernels
