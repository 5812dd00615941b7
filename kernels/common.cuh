// Device helpers shared by the kernels: f32/bf16/f16 load-store in fp32, the dtype switch, warp and
// block reductions, and Philox4x32-10 identical to core/rng.cpp (so GPU dropout masks match the CPU).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/kernels.h"
#include "tessera/core/dtype.h"
#include "tessera/core/cuda_check.h"

namespace tessera::kernels {

__device__ __forceinline__ float load_f(const float* p) { return *p; }
__device__ __forceinline__ float load_f(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ float load_f(const __half* p) { return __half2float(*p); }
__device__ __forceinline__ void store_f(float* p, float v) { *p = v; }
__device__ __forceinline__ void store_f(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ void store_f(__half* p, float v) { *p = __float2half_rn(v); }

// A 16-byte vector of T as fp32 values (16 / sizeof(T) of them).
template <typename T>
__device__ __forceinline__ void unpack16(const uint4& raw, float* out) {
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int k = 0; k < 16 / static_cast<int>(sizeof(T)); ++k) out[k] = load_f(e + k);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Block-wide sum/max for blockDim.x a multiple of 32 (<= 1024); every thread gets the result.
template <bool kMax>
__device__ __forceinline__ float block_reduce(float v) {
  __shared__ float partial[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = kMax ? warp_max(v) : warp_sum(v);
  __syncthreads();  // partial may still be read from a previous call
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  float r = lane < warps ? partial[lane] : (kMax ? -INFINITY : 0.0f);
  return kMax ? warp_max(r) : warp_sum(r);
}

// Philox4x32-10 exactly as tessera::philox4x32 (core/rng.cpp): the four words into out.
__device__ __forceinline__ void philox4(uint64_t key, uint64_t counter_high, uint64_t counter_low, uint32_t (&out)[4]) {
  uint32_t c0 = static_cast<uint32_t>(counter_low), c1 = static_cast<uint32_t>(counter_low >> 32);
  uint32_t c2 = static_cast<uint32_t>(counter_high), c3 = static_cast<uint32_t>(counter_high >> 32);
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    const uint32_t hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
    const uint32_t hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
    const uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0, c1 = lo1, c2 = n2, c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

// The CPU keep rule (ops/cpu/dropout.h) uniform_of_quarter(offset + i) >= p, with the uniform
// (bits >> 8) / 2^24 of word (offset + i) % 4 of Philox block (offset + i) / 4, is exactly
// (bits >> 8) >= keep_threshold where keep_threshold = ceil(p * 2^24) (make_dropout_rule).
struct DropoutRule {
  uint64_t seed, stream, offset;
  uint32_t keep_threshold;
  float keep_scale;
  __device__ __forceinline__ bool keeps_word(uint32_t word) const { return (word >> 8) >= keep_threshold; }
  __device__ __forceinline__ bool keeps(uint64_t i) const {
    uint32_t words[4];
    philox4(seed, stream, (offset + i) >> 2, words);
    const uint32_t q = static_cast<uint32_t>((offset + i) & 3);
    return keeps_word(q == 0 ? words[0] : q == 1 ? words[1] : q == 2 ? words[2] : words[3]);
  }
  // The words of the four decisions of block `block`: indices offset + i with (offset + i) / 4 == block.
  __device__ __forceinline__ void block_words(uint64_t block, uint32_t (&words)[4]) const {
    philox4(seed, stream, block, words);
  }
};

// Host side: the rule for DropoutArgs (elementwise.cu).
DropoutRule make_dropout_rule(const DropoutArgs& d);

}  // namespace tessera::kernels

#define TESSERA_KERNEL_LAUNCH_CHECK() TESSERA_CUDA_CHECK(cudaGetLastError())

// Runs the statement with T bound to the device storage type of a float DType.
#define TESSERA_DEVICE_FLOAT_SWITCH(dtype, T, ...)                                             \
  switch (dtype) {                                                                             \
    case ::tessera::DType::f32: { using T = float; __VA_ARGS__; break; }                       \
    case ::tessera::DType::bf16: { using T = __nv_bfloat16; __VA_ARGS__; break; }              \
    case ::tessera::DType::f16: { using T = __half; __VA_ARGS__; break; }                      \
    default: TESSERA_FAIL("CUDA kernels take f32, bf16 or f16 storage, got ", ::tessera::dtype_name(dtype)); \
  }
