// Linear forward for a few rows (decode: one row per sequence), bf16/f16: out[m, n] = in[m, :] .
// weight[n, :] + bias[n] for m < rows <= kSkinnyMaxRows. A GEMM library's tiles are built for many
// rows; with one to eight the work is reading the weight once, so each warp streams weight rows
// (16-byte loads, several in flight) and dots them with all the input rows (cached in L1), fp32
// accumulation, a warp-shuffle sum, then bias and the store.
#include "kernels/common.cuh"
#include "kernels/kernels.h"

namespace tessera::kernels {

namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kUnroll = 4;  // 16-byte weight loads in flight per lane

template <typename T, int kRows>
__global__ void skinny_linear_kernel(const T* in, const T* weight, const T* bias, int64_t n_out, int64_t k_in, T* out) {
  constexpr int kVec = 16 / sizeof(T);
  const int lane = threadIdx.x & 31;
  const int64_t n = blockIdx.x * int64_t(kWarpsPerBlock) + (threadIdx.x >> 5);
  if (n >= n_out) return;  // whole warps leave together
  const T* w = weight + n * k_in;
  float acc[kRows];
#pragma unroll
  for (int m = 0; m < kRows; ++m) acc[m] = 0.0f;
  const int64_t step = 32 * kVec;
  int64_t k = lane * kVec;
  for (; k + (kUnroll - 1) * step < k_in; k += kUnroll * step) {
    uint4 wv[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) wv[u] = __ldg(reinterpret_cast<const uint4*>(w + k + u * step));
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const T* we = reinterpret_cast<const T*>(&wv[u]);
#pragma unroll
      for (int m = 0; m < kRows; ++m) {
        const uint4 xv = *reinterpret_cast<const uint4*>(in + m * k_in + k + u * step);
        const T* xe = reinterpret_cast<const T*>(&xv);
#pragma unroll
        for (int e = 0; e < kVec; ++e) acc[m] += load_f(we + e) * load_f(xe + e);
      }
    }
  }
  for (; k < k_in; k += step) {
    const uint4 wv = __ldg(reinterpret_cast<const uint4*>(w + k));
    const T* we = reinterpret_cast<const T*>(&wv);
#pragma unroll
    for (int m = 0; m < kRows; ++m) {
      const uint4 xv = *reinterpret_cast<const uint4*>(in + m * k_in + k);
      const T* xe = reinterpret_cast<const T*>(&xv);
#pragma unroll
      for (int e = 0; e < kVec; ++e) acc[m] += load_f(we + e) * load_f(xe + e);
    }
  }
#pragma unroll
  for (int m = 0; m < kRows; ++m) acc[m] = warp_sum(acc[m]);
  if (lane == 0) {
    const float b = bias ? load_f(bias + n) : 0.0f;
#pragma unroll
    for (int m = 0; m < kRows; ++m) store_f(out + m * n_out + n, acc[m] + b);
  }
}

template <typename T, int kRows>
void launch(const void* in, const void* weight, const void* bias, int64_t n_out, int64_t k_in, void* out,
            cudaStream_t s) {
  const unsigned blocks = static_cast<unsigned>((n_out + kWarpsPerBlock - 1) / kWarpsPerBlock);
  skinny_linear_kernel<T, kRows><<<blocks, 32 * kWarpsPerBlock, 0, s>>>(
      static_cast<const T*>(in), static_cast<const T*>(weight), static_cast<const T*>(bias), n_out, k_in,
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
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return (t == DType::bf16 || t == DType::f16) && rows >= 1 && rows <= kSkinnyMaxRows && k_in % 8 == 0 &&
         aligned(in) && aligned(weight);
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
