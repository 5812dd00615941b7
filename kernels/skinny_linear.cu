// Linear forward for a few rows (decode: one row per sequence), bf16/f16: out[m, n] = in[m, :] .
// weight[n, :] + bias[n] for m < rows <= kSkinnyMaxRows. A GEMM library's tiles are built for many
// rows; with one to eight the work is reading the weight once, so warps stream weight rows (16-byte
// loads, up to eight in flight per lane; a long row split over up to eight warps) and dot them with
// all the input rows (cached in L1), fp32 accumulation, warp-shuffle sums, then bias and the store.
#include "kernels/common.cuh"
#include "kernels/kernels.h"
#include "kernels/vec16.cuh"

namespace tessera::kernels {

namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kUnroll = 8;  // 16-byte weight loads in flight per lane

// Warp w of a block takes output n = blockIdx.x * (8 / split) + w / split and the K part w % split of
// it (split warps share a long row, so each lane has at most a few loads to wait for); the parts are
// summed in part order through shared memory.
template <typename T, int kRows>
__global__ void skinny_linear_kernel(const T* in, const T* weight, const T* bias, int64_t n_out, int64_t k_in,
                                     int split, T* out) {
  constexpr int kVec = 16 / sizeof(T);
  __shared__ float partial[kWarpsPerBlock][kRows];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t n = blockIdx.x * int64_t(kWarpsPerBlock / split) + warp / split;
  const int part = warp % split;
  const int64_t step = 32 * kVec;
  const int64_t vectors = k_in / kVec, per_part = (vectors + split - 1) / split;
  const int64_t k_begin = part * per_part * kVec, k_end = min(k_in, (part + 1) * per_part * kVec);
  float acc[kRows];
#pragma unroll
  for (int m = 0; m < kRows; ++m) acc[m] = 0.0f;
  if (n < n_out) {
    const T* w = weight + n * k_in;
    for (int64_t k0 = k_begin + lane * kVec; k0 < k_end; k0 += kUnroll * step) {
      uint4 wv[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        if (k0 + u * step < k_end) wv[u] = __ldg(reinterpret_cast<const uint4*>(w + k0 + u * step));
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (k0 + u * step >= k_end) break;
        const T* we = reinterpret_cast<const T*>(&wv[u]);
#pragma unroll
        for (int m = 0; m < kRows; ++m) {
          const uint4 xv = *reinterpret_cast<const uint4*>(in + m * k_in + k0 + u * step);
          const T* xe = reinterpret_cast<const T*>(&xv);
#pragma unroll
          for (int e = 0; e < kVec; ++e) acc[m] += load_f(we + e) * load_f(xe + e);
        }
      }
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
      store_f(out + m * n_out + n, total + b);
    }
  }
}

// Warps per output row: enough that each lane reads at most kUnroll vectors of it (1, 2, 4 or 8).
int split_for(int64_t k_in, int64_t vec) {
  int split = 1;
  while (split < kWarpsPerBlock && k_in > split * 32 * vec * kUnroll) split *= 2;
  return split;
}

template <typename T, int kRows>
void launch(const void* in, const void* weight, const void* bias, int64_t n_out, int64_t k_in, void* out,
            cudaStream_t s) {
  const int split = split_for(k_in, 16 / sizeof(T));
  const int64_t rows_per_block = kWarpsPerBlock / split;
  const unsigned blocks = static_cast<unsigned>((n_out + rows_per_block - 1) / rows_per_block);
  skinny_linear_kernel<T, kRows><<<blocks, 32 * kWarpsPerBlock, 0, s>>>(
      static_cast<const T*>(in), static_cast<const T*>(weight), static_cast<const T*>(bias), n_out, k_in, split,
      static_cast<T*>(out));
}

template <typename T>
void launch_rows(int64_t rows, const void* in, const void* weight, const void* bias, int64_t n_out, int64_t k_in,
                 void* out, cudaStream_t s) {
  switch (rows) {
    case 1: launch<T, 1>(in, weight, bias, n_out, k_in, out, s); break;
    case 2: launch<T, 2>(in, weight, bias, n_out, k_in, out, s); break;
    case 3: launch<T, 3>(in, weight, bias, n_out, k_in, out, s); break;
    case 4: launch<T, 4>(in, weight, bias, n_out, k_in, out, s); break;
    case 5: launch<T, 5>(in, weight, bias, n_out, k_in, out, s); break;
    case 6: launch<T, 6>(in, weight, bias, n_out, k_in, out, s); break;
    case 7: launch<T, 7>(in, weight, bias, n_out, k_in, out, s); break;
    case 8: launch<T, 8>(in, weight, bias, n_out, k_in, out, s); break;
    default: TESSERA_FAIL("skinny_linear_forward: rows ", rows, " outside 1..", kSkinnyMaxRows);
  }
}

}  // namespace

bool skinny_linear_applies(DType t, int64_t rows, int64_t k_in, const void* in, const void* weight) {
  return (t == DType::bf16 || t == DType::f16) && rows >= 1 && rows <= kSkinnyMaxRows && k_in % 8 == 0 &&
         aligned16(in) && aligned16(weight);
}

void skinny_linear_forward(DType t, const void* in, const void* weight, const void* bias, int64_t rows, int64_t n_out,
                           int64_t k_in, void* out, cudaStream_t s) {
  if (rows == 0 || n_out == 0) return;
  if (t == DType::bf16) launch_rows<__nv_bfloat16>(rows, in, weight, bias, n_out, k_in, out, s);
  else if (t == DType::f16) launch_rows<__half>(rows, in, weight, bias, n_out, k_in, out, s);
  else TESSERA_FAIL("skinny_linear_forward takes bf16 or f16, got ", dtype_name(t));
  TESSERA_KERNEL_LAUNCH_CHECK();
}

}  // namespace tessera::kernels
