// Fused decode linear (decode_linear.h): a GEMV for up to 8 input rows (bf16/f16, fp32 accumulation)
// with (1) the output rows split evenly over one wave of blocks and each block's weights split evenly
// over its warps in 512-byte segments, every warp keeping kInFlight 16-byte loads per lane in flight,
// the first ones issued before cudaGridDependencySynchronize, so under programmatic dependent launch
// they overlap the previous kernel's tail; (2) an optional LayerNorm prologue: every block normalises
// the input rows into shared memory (one load per element, block-wide two-pass fp32 statistics,
// output rounded to the dtype) and the GEMV reads the rows from there; (3) an epilogue after bias
// (rounded to the dtype as the unfused linear's output): GeLU (tanh or erf, rounded again) or a
// residual add. Each step rounds where the unfused kernels round, so the fused layer equals the
// unfused one up to fp32 summation order.
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
constexpr int kInFlight = 12;     // 16-byte weight loads in flight per lane
constexpr int kMaxBlockRows = 64;  // output rows of one block
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

// Block b takes the output rows [b R, (b + 1) R) (R = rows_per_block). Their weights are cut into
// segments of 32 16-byte vectors (one per lane; a row's last segment may be shorter) and the block's
// segments are split evenly over its warps in row-major order, so every warp streams the same number
// of bytes whatever the row length. Each warp keeps kInFlight loads in flight (a ring of registers:
// a slot is reloaded with the segment kInFlight ahead as soon as it is used), the first ones issued
// before the wait for the previous grid. A warp sums its part of a row into partial[row][warp] (a
// row's segments of one warp are contiguous); the block then adds the warps' parts in warp order and
// applies bias and epilogue.
template <typename T, int kRows, bool kLayerNorm>
__global__ void __launch_bounds__(32 * kWarpsPerBlock)
    decode_linear_kernel(const T* in, const T* ln_weight, const T* ln_bias, float ln_eps, const T* weight,
                         const T* bias, int epilogue, const T* residual, int64_t n_out, int64_t k_in,
                         int rows_per_block, T* out) {
  constexpr int kVec = 16 / sizeof(T);
  extern __shared__ __align__(16) unsigned char dynamic_shared[];
  __shared__ float partial[kMaxBlockRows][kWarpsPerBlock][kRows];
  __shared__ float red_sum[kLayerNorm ? kRows : 1][kWarpsPerBlock], red_sq[kLayerNorm ? kRows : 1][kWarpsPerBlock];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int vectors = static_cast<int>(k_in / kVec);  // per row
  const int per_row = (vectors + 31) / 32;             // segments per row
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * rows_per_block;
  const int rows_here = static_cast<int>(min(static_cast<int64_t>(rows_per_block), n_out - row0));
  const int segments = rows_here * per_row;
  const int seg_begin = static_cast<int>(static_cast<int64_t>(segments) * warp / kWarpsPerBlock);
  const int count = static_cast<int>(static_cast<int64_t>(segments) * (warp + 1) / kWarpsPerBlock) - seg_begin;
  const T* block_weight = weight + row0 * k_in;
  // The ring's load position: row and segment of the next segment to request.
  int load_row = seg_begin / per_row, load_seg = seg_begin - load_row * per_row;
  const auto request = [&](uint4& slot) {
    const int c = load_seg * 32 + lane;
    if (c < vectors)
      slot = __ldg(reinterpret_cast<const uint4*>(block_weight + static_cast<int64_t>(load_row) * k_in) + c);
    if (++load_seg == per_row) load_seg = 0, ++load_row;
  };
  uint4 wv[kInFlight];
#pragma unroll
  for (int u = 0; u < kInFlight; ++u)
    if (u < count) request(wv[u]);
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
    x = xs;
  }
  for (int i = threadIdx.x; i < rows_here * kWarpsPerBlock * kRows; i += blockDim.x) (&partial[0][0][0])[i] = 0.0f;
  __syncthreads();
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
      if (base + u + kInFlight < count) request(wv[u]);
      if (++seg == per_row) {  // the row is done (warp-uniform)
        flush();
        seg = 0, ++row;
      }
    }
  }
  if (seg != 0) flush();  // the row goes on in the next warp
  __syncthreads();
  for (int i = threadIdx.x; i < rows_here * kRows; i += blockDim.x) {
    const int r = i % rows_here, m = i / rows_here;
    const int64_t n = row0 + r;
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarpsPerBlock; ++w) total += partial[r][w][m];
    const float b = bias ? load_f(bias + n) : 0.0f;
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
  const auto kernel = decode_linear_kernel<T, kRows, kLayerNorm>;
  const size_t shared_bytes = kLayerNorm ? static_cast<size_t>(kRows * a.k_in) * sizeof(T) : 0;
  // One wave of blocks (default: as many as fit on the GPU at once) with the output rows split evenly
  // over them: with a LayerNorm prologue each block normalises the input once, and the blocks stream
  // the same bytes. blocks_per_sm 0: 8 output rows a block.
  const auto [per_sm, sms] = occupancy(reinterpret_cast<const void*>(kernel), shared_bytes);
  const int64_t wave = static_cast<int64_t>(sms) * (a.blocks_per_sm > 0 ? std::min(a.blocks_per_sm, per_sm) : per_sm);
  int64_t rows_per_block = a.blocks_per_sm == 0 ? 8 : (a.n_out + wave - 1) / wave;
  rows_per_block = std::min<int64_t>(rows_per_block, kMaxBlockRows);
  const int64_t blocks = (a.n_out + rows_per_block - 1) / rows_per_block;
  launch_kernel(a.programmatic, kernel, dim3(static_cast<unsigned>(blocks)), dim3(32 * kWarpsPerBlock), shared_bytes,
                s, static_cast<const T*>(a.in), static_cast<const T*>(a.ln_weight),
                static_cast<const T*>(a.ln_bias), a.ln_eps, static_cast<const T*>(a.weight),
                static_cast<const T*>(a.bias), static_cast<int>(a.epilogue), static_cast<const T*>(a.residual), a.n_out,
                a.k_in, static_cast<int>(rows_per_block), static_cast<T*>(a.out));
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
