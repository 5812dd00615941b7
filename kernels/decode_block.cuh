// The pieces of the fused decode linear (decode_linear.cu), kept apart from its kernel so each reads on
// its own: 8-warp blocks, a LayerNorm of the (<= 8) input rows into shared memory, a GEMV that streams a
// block's weight rows through a per-lane register ring whose first loads are issued before the grid
// dependency wait, and the occupancy query that sizes its one-wave grid.
#pragma once
#include <algorithm>
#include <map>
#include <mutex>
#include <utility>

#include "kernels/common.cuh"

namespace tessera::kernels::decode {

constexpr int kWarpsPerBlock = 8;
constexpr int kInFlight = 12;  // 16-byte weight loads in flight per lane
constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2 / pi)

template <typename T>
__device__ __forceinline__ float round_to(float v) {
  T t;
  store_f(&t, v);
  return load_f(&t);
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
      unpack16<T>(raw[m], f);
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
      unpack16<T>(raw[m], f);
#pragma unroll
      for (int e = 0; e < kVec; ++e) sq += (f[e] - mean[m]) * (f[e] - mean[m]);
    }
    sq = warp_sum(sq);
    if (lane == 0) red_sq[m][warp] = sq;
  }
  __syncthreads();
  float g[kVec], b[kVec];
  unpack16<T>(gamma, g);
  unpack16<T>(beta, b);
#pragma unroll
  for (int m = 0; m < kRows; ++m) {
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarpsPerBlock; ++w) total += red_sq[m][w];
    rstd[m] = rsqrtf(total / static_cast<float>(k) + eps);
    if (holds) {
      float f[kVec];
      unpack16<T>(raw[m], f);
      uint4 packed;
      T* p = reinterpret_cast<T*>(&packed);
#pragma unroll
      for (int e = 0; e < kVec; ++e) store_f(p + e, (f[e] - mean[m]) * rstd[m] * g[e] + b[e]);
      *reinterpret_cast<uint4*>(xs + m * k + t * kVec) = packed;
    }
  }
}

// A block's GEMV over `rows` consecutive weight rows (row-major, k_in each): the rows are cut into
// segments of 32 16-byte vectors (one per lane; a row's last segment may be shorter) and the segments
// are split evenly over the block's warps in row-major order, so every warp streams the same number of
// bytes whatever the row length. Each warp keeps kInFlight loads in flight (a ring of registers: a slot
// is reloaded with the segment kInFlight ahead as soon as it is used). start() issues the first loads
// (call it before the grid dependency wait); dot() sums each warp's part of a row into
// partial[row][warp][m] (a row's segments of one warp are contiguous), and leaves the entries of rows
// a warp does not touch alone (the caller zeroes partial first).
template <typename T, int kRows>
struct WeightRowStream {
  static constexpr int kVec = 16 / sizeof(T);
  const T* weight;
  int64_t k_in;
  int vectors, per_row, seg_begin, count, load_row, load_seg;
  uint4 wv[kInFlight];

  __device__ __forceinline__ void request(uint4& slot, int lane) {
    const int c = load_seg * 32 + lane;
    if (c < vectors) slot = __ldg(reinterpret_cast<const uint4*>(weight + static_cast<int64_t>(load_row) * k_in) + c);
    if (++load_seg == per_row) load_seg = 0, ++load_row;
  }

  __device__ __forceinline__ void start(const T* block_weight, int rows, int64_t k) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    weight = block_weight;
    k_in = k;
    vectors = static_cast<int>(k / kVec);
    per_row = (vectors + 31) / 32;
    const int segments = rows * per_row;
    seg_begin = static_cast<int>(static_cast<int64_t>(segments) * warp / kWarpsPerBlock);
    count = static_cast<int>(static_cast<int64_t>(segments) * (warp + 1) / kWarpsPerBlock) - seg_begin;
    load_row = seg_begin / per_row, load_seg = seg_begin - load_row * per_row;
#pragma unroll
    for (int u = 0; u < kInFlight; ++u)
      if (u < count) request(wv[u], lane);
  }

  // x: [kRows, k_in] (global or shared memory).
  __device__ __forceinline__ void dot(const T* x, float (*partial)[kWarpsPerBlock][kRows]) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int row = seg_begin / per_row, seg = seg_begin - row * per_row;
    float acc[kRows];
#pragma unroll
    for (int m = 0; m < kRows; ++m) acc[m] = 0.0f;
    const auto flush = [&] {
#pragma unroll
      for (int m = 0; m < kRows; ++m) {
        const float v = warp_sum(acc[m]);
        if (lane == 0) partial[row][warp][m] = v;
        acc[m] = 0.0f;
      }
    };
    for (int base = 0; base < count; base += kInFlight) {
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) {
        if (base + u >= count) break;
        const int c = seg * 32 + lane;
        if (c < vectors) {
          const T* we = reinterpret_cast<const T*>(&wv[u]);
#pragma unroll
          for (int m = 0; m < kRows; ++m) {
            const uint4 xv = *reinterpret_cast<const uint4*>(x + m * k_in + static_cast<int64_t>(c) * kVec);
            const T* xe = reinterpret_cast<const T*>(&xv);
#pragma unroll
            for (int e = 0; e < kVec; ++e) acc[m] += load_f(we + e) * load_f(xe + e);
          }
        }
        if (base + u + kInFlight < count) request(wv[u], lane);
        if (++seg == per_row) {  // the row is done (warp-uniform)
          flush();
          seg = 0, ++row;
        }
      }
    }
    if (seg != 0) flush();  // the row goes on in the next warp
  }
};

// The linear's output v (already rounded to the dtype) through GeLU (tanh or erf).
__device__ __forceinline__ float gelu_tanh(float v) { return 0.5f * v * (1.0f + tanhf(kGeluK * (v + 0.044715f * v * v * v))); }
__device__ __forceinline__ float gelu_erf(float v) { return 0.5f * v * (1.0f + erff(v * 0.7071067811865476f)); }

// Blocks of the kernel resident at once per SM, and the SM count.
inline std::pair<int, int> occupancy(const void* kernel, size_t shared_bytes) {
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

}  // namespace tessera::kernels::decode
