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
#include "kernels/decode_linear.h"

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

// The calling warp's share of a block's `rows` consecutive weight rows (k elements each): the rows cut
// into segments of 32 16-byte vectors (one per lane; a row's last segment may be shorter), split evenly
// over the block's warps in row-major order. A warp's segments are one contiguous range of bytes.
template <typename T>
struct WarpSegments {
  static constexpr int kVec = 16 / sizeof(T);
  int vectors, per_row, begin, count;  // vectors per row, segments per row, the warp's first and count
  __device__ __forceinline__ WarpSegments(int rows, int64_t k) {
    const int warp = threadIdx.x >> 5;
    vectors = static_cast<int>(k / kVec);
    per_row = (vectors + 31) / 32;
    const int segments = rows * per_row;
    begin = static_cast<int>(static_cast<int64_t>(segments) * warp / kWarpsPerBlock);
    count = static_cast<int>(static_cast<int64_t>(segments) * (warp + 1) / kWarpsPerBlock) - begin;
  }
  // Byte offset of segment s's start (s == begin + count: the share's end) from the first row's.
  __device__ __forceinline__ int64_t byte_offset(int s) const {
    const int row = s / per_row, seg = s - row * per_row;
    const int64_t row_bytes = static_cast<int64_t>(vectors) * 16;
    return row * row_bytes + (seg == 0 ? 0 : min(static_cast<int64_t>(seg) * 512, row_bytes));
  }
};

// acc[m] += weight vector w . vector c of input row m (x: [kRows, k_in]), in element order.
template <typename T, int kRows>
__device__ __forceinline__ void dot_vector(const uint4& w, const T* x, int64_t k_in, int c, float (&acc)[kRows]) {
  constexpr int kVec = 16 / sizeof(T);
  const T* we = reinterpret_cast<const T*>(&w);
#pragma unroll
  for (int m = 0; m < kRows; ++m) {
    const uint4 xv = *reinterpret_cast<const uint4*>(x + m * k_in + static_cast<int64_t>(c) * kVec);
    const T* xe = reinterpret_cast<const T*>(&xv);
#pragma unroll
    for (int e = 0; e < kVec; ++e) acc[m] += load_f(we + e) * load_f(xe + e);
  }
}

// The warp's sums of one row into its partial entries (lane 0 writes), the accumulators back to 0.
template <int kRows>
__device__ __forceinline__ void flush_row(float (&acc)[kRows], float* partial_row_warp, int lane) {
#pragma unroll
  for (int m = 0; m < kRows; ++m) {
    const float v = warp_sum(acc[m]);
    if (lane == 0) partial_row_warp[m] = v;
    acc[m] = 0.0f;
  }
}

// A block's GEMV over `rows` consecutive weight rows (row-major, k_in each), each warp streaming its
// WarpSegments share (every warp the same number of bytes whatever the row length). Each warp keeps
// kInFlight loads in flight (a ring of registers: a slot
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
    const int lane = threadIdx.x & 31;
    weight = block_weight;
    k_in = k;
    const WarpSegments<T> share(rows, k);
    vectors = share.vectors, per_row = share.per_row, seg_begin = share.begin, count = share.count;
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
    const auto flush = [&] { flush_row<kRows>(acc, partial[row][warp], lane); };
    for (int base = 0; base < count; base += kInFlight) {
#pragma unroll
      for (int u = 0; u < kInFlight; ++u) {
        if (base + u >= count) break;
        const int c = seg * 32 + lane;
        if (c < vectors) dot_vector<T, kRows>(wv[u], x, k_in, c, acc);
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

// The calling warp's part of a block's GEMV whose `rows` weight rows arrive in shared memory (ws:
// [rows, k_in] as in global memory; the warp's WarpSegments share): ready(i) is called before the
// warp reads its i-th segment (it waits for the bytes); sums into partial as WeightRowStream::dot does,
// in the same order.
template <typename T, int kRows, typename Ready>
__device__ __forceinline__ void shared_rows_dot(const T* ws, int rows, int64_t k_in, const T* x,
                                                float (*partial)[kWarpsPerBlock][kRows], Ready ready) {
  constexpr int kVec = 16 / sizeof(T);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const WarpSegments<T> share(rows, k_in);
  int row = share.begin / share.per_row, seg = share.begin - row * share.per_row;
  float acc[kRows];
#pragma unroll
  for (int m = 0; m < kRows; ++m) acc[m] = 0.0f;
#pragma unroll 4
  for (int i = 0; i < share.count; ++i) {
    ready(i);
    const int c = seg * 32 + lane;
    const T* w = ws + static_cast<int64_t>(row) * k_in + static_cast<int64_t>(c) * kVec;
    if (c < share.vectors) dot_vector<T, kRows>(*reinterpret_cast<const uint4*>(w), x, k_in, c, acc);
    if (++seg == share.per_row) {  // the row is done (warp-uniform)
      flush_row<kRows>(acc, partial[row][warp], lane);
      seg = 0, ++row;
    }
  }
  if (seg != 0) flush_row<kRows>(acc, partial[row][warp], lane);  // the row goes on in the next warp
}

// The linear's output v (already rounded to the dtype) through GeLU (tanh or erf).
__device__ __forceinline__ float gelu_tanh(float v) { return 0.5f * v * (1.0f + tanhf(kGeluK * (v + 0.044715f * v * v * v))); }
__device__ __forceinline__ float gelu_erf(float v) { return 0.5f * v * (1.0f + erff(v * 0.7071067811865476f)); }

// The block's output rows [row0, row0 + rows_here) of every input row m: the warps' parts in warp order,
// plus bias, rounded to the dtype (the linear's output as the unfused path stores it), then the
// epilogue (DecodeEpilogue), into out [kRows, n_out]. Call after a __syncthreads that ends the dots.
template <typename T, int kRows>
__device__ __forceinline__ void finish_rows(const float (*partial)[kWarpsPerBlock][kRows], int rows_here,
                                            int64_t row0, const T* bias, int epilogue, const T* residual,
                                            int64_t n_out, T* out) {
  for (int i = threadIdx.x; i < rows_here * kRows; i += blockDim.x) {
    const int r = i % rows_here, m = i / rows_here;
    const int64_t n = row0 + r;
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarpsPerBlock; ++w) total += partial[r][w][m];
    const float b = bias ? load_f(bias + n) : 0.0f;
    float v = round_to<T>(total + b);
    if (epilogue == static_cast<int>(DecodeEpilogue::gelu_tanh)) {
      v = gelu_tanh(v);
    } else if (epilogue == static_cast<int>(DecodeEpilogue::gelu_erf)) {
      v = gelu_erf(v);
    } else if (epilogue == static_cast<int>(DecodeEpilogue::residual_add)) {
      v = load_f(residual + m * n_out + n) + v;
    }
    store_f(out + m * n_out + n, v);
  }
}

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
