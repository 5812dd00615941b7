// What the flash-attention kernels on Hopper's warpgroup MMA share: cp.async copies of head rows into
// 128-byte-swizzled tiles, the tiles' wgmma descriptors, and small numeric helpers.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/attention_copies.cuh"
#include "kernels/hopper/wgmma.cuh"

namespace tessera::kernels::hopper {

constexpr int kThreads = 128;  // one warpgroup
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Rows [row0, row0 + ROWS) x HN of a strided head view into a swizzled tile (column blocks of 64
// elements, ROWS x 128 bytes each); rows >= seq become zeros.
template <typename T, int HN, int ROWS>
__device__ __forceinline__ void load_tile(unsigned char* tile, const T* base, int64_t row_stride, int row0, int seq) {
  constexpr int kChunks = HN / 8;  // 16-byte chunks per row
  static_assert((ROWS * kChunks) % kThreads == 0, "tile must split evenly over the warpgroup");
#pragma unroll
  for (int k = 0; k < ROWS * kChunks / kThreads; ++k) {
    const int c = static_cast<int>(threadIdx.x) + k * kThreads;
    const int r = c / kChunks, chunk = c % kChunks;
    const int row = row0 + r;
    const bool valid = row < seq;
    cp_async16(tile + (chunk / 8) * ROWS * 128 + swizzled_offset(r, chunk % 8),
               base + static_cast<int64_t>(valid ? row : 0) * row_stride + chunk * 8, valid);
  }
}

// K-major operand (Q, K): 16 columns kk * 16.. of a tile of ROWS rows.
template <int ROWS>
__device__ __forceinline__ uint64_t k_major(const unsigned char* tile, int kk) {
  return smem_descriptor(tile + (kk / 4) * ROWS * 128 + (kk % 4) * 32, 16, 1024);
}
// N-major operand (V as B of P V): keys kk * 16.. of a tile of ROWS keys; column blocks ROWS x 128 apart.
template <int ROWS>
__device__ __forceinline__ uint64_t n_major(const unsigned char* tile, int kk) {
  return smem_descriptor(tile + kk * 16 * 128, ROWS * 128, 1024);
}

// A compute capability 9.0 device (the sm_90a code runs there only), asked once.
inline bool hopper_device() {
  static const bool hopper = [] {
    int device = 0, major = 0, minor = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) return false;
    return major == 9 && minor == 0;
  }();
  return hopper;
}

}  // namespace tessera::kernels::hopper
