// Fused decode MLP (decode_mlp.h): out = h + fc2(gelu(fc1(layernorm(h)))) for up to 8 rows in one
// kernel, split over the FFN dimension so that no block waits for another's fc1 output:
//   1. before the grid dependency wait, block b requests its first fc1 weight rows (the register ring
//      of decode::WeightRowStream) and copies its rows of the transposed fc2 weight into shared memory
//      (cp.async), so the HBM streams both while the previous kernel finishes;
//   2. it normalises h into shared memory, runs the fc1 GEMV for its FFN rows, and rounds the bias add
//      and the GeLU to the dtype as the separate ops do;
//   3. it multiplies its activations by its fc2 rows (thread t owns 8 (bf16/f16) output columns and
//      sums over the block's FFN rows in fp32) and stores the partial sums in the workspace;
//   4. after a grid-wide barrier (the blocks are one wave, all resident: the grid is planned from the
//      occupancy, and the next kernel cannot launch before every block has passed its trigger), block b
//      adds up its share of the output columns over the blocks' partial sums in a fixed order (a warp
//      per column and row, lanes over blocks, then the warp's butterfly: runs are bitwise
//      reproducible), adds bias and residual, rounding as the unfused linear and add.
#include <algorithm>

#include "kernels/common.cuh"
#include "kernels/decode_block.cuh"
#include "kernels/decode_mlp.h"
#include "kernels/kernels.h"
#include "kernels/programmatic_launch.cuh"

namespace tessera::kernels {

namespace {

using decode::kThreads;
using decode::kWarpsPerBlock;
constexpr int64_t kMaxBlocks = 1024;
constexpr size_t kBarrierBytes = 256;  // the barrier's words, then the partial sums

// A grid-wide barrier for one wave of blocks, reusable without a reset: the last block to arrive
// clears the count and advances the generation the others wait on.
struct GridBarrier {
  alignas(128) unsigned int arrived;  // own cache lines: the waiting blocks' polls do not slow the arrivals
  alignas(128) unsigned int generation;
};

__device__ __forceinline__ unsigned int load_acquire(const unsigned int* p) {
  unsigned int v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void grid_barrier(GridBarrier* b) {
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned int generation = load_acquire(&b->generation);
    __threadfence();
    if (atomicAdd(&b->arrived, 1u) == gridDim.x - 1) {
      b->arrived = 0;
      __threadfence();
      atomicAdd(&b->generation, 1u);
    } else {
      while (load_acquire(&b->generation) == generation) __nanosleep(64);
    }
    __threadfence();
  }
  __syncthreads();
}

__device__ __forceinline__ void copy_async16(void* shared, const void* global) {
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(address), "l"(global));
}

// Shared memory of a block with `slice` FFN rows, in bytes (the kernel's carve-up below).
template <typename T, int kRows, bool kSharedFc2>
__host__ __device__ constexpr size_t shared_bytes(int64_t slice, int64_t hidden) {
  return static_cast<size_t>((kSharedFc2 ? slice * hidden : 0) + kRows * hidden) * sizeof(T) +
         static_cast<size_t>(slice * kWarpsPerBlock * kRows + kRows * slice) * sizeof(float);
}

template <typename T, int kRows, bool kSharedFc2>
__global__ void __launch_bounds__(kThreads)
    decode_mlp_kernel(const T* in, const T* ln_weight, const T* ln_bias, float ln_eps, const T* fc1_weight,
                      const T* fc1_bias, const T* fc2_weight_t, const T* fc2_bias, int gelu, void* workspace,
                      int64_t hidden, int64_t ffn, int slice_rows, T* out) {
  constexpr int kVec = 16 / sizeof(T);
  extern __shared__ __align__(16) unsigned char dynamic_shared[];
  constexpr int kChunk = 8;  // output columns a block finishes at a time (step 4)
  __shared__ float red_sum[kRows][kWarpsPerBlock], red_sq[kRows][kWarpsPerBlock];
  __shared__ float warp_sums[kWarpsPerBlock][kRows][kChunk];
  const int t = threadIdx.x;
  const int vectors = static_cast<int>(hidden / kVec);  // per row
  const int64_t k0 = static_cast<int64_t>(blockIdx.x) * slice_rows;
  const int rows_here = static_cast<int>(min(static_cast<int64_t>(slice_rows), ffn - k0));
  T* fc2_rows = reinterpret_cast<T*>(dynamic_shared);                            // [slice, hidden]
  T* xs = fc2_rows + (kSharedFc2 ? static_cast<int64_t>(slice_rows) * hidden : 0);  // [kRows, hidden]
  auto* partial = reinterpret_cast<float (*)[kWarpsPerBlock][kRows]>(xs + kRows * hidden);  // [slice][warps][kRows]
  float* act = &partial[slice_rows][0][0];                                       // [kRows][slice]
  // 1. Weights first: fc1's through the register ring, then fc2's slice into shared memory.
  decode::WeightRowStream<T, kRows> stream;
  stream.start(fc1_weight + k0 * hidden, rows_here, hidden);
  const auto* fc2_source = reinterpret_cast<const uint4*>(fc2_weight_t + k0 * hidden);  // [rows_here][vectors]
  if constexpr (kSharedFc2) {
    const auto* source = fc2_source;
    auto* target = reinterpret_cast<uint4*>(fc2_rows);
    for (int i = t; i < rows_here * vectors; i += kThreads) copy_async16(target + i, source + i);
    asm volatile("cp.async.commit_group;\n" ::);
  }
  uint4 gamma = make_uint4(0, 0, 0, 0), beta = gamma;
  if (t < vectors) {
    gamma = __ldg(reinterpret_cast<const uint4*>(ln_weight) + t);
    beta = __ldg(reinterpret_cast<const uint4*>(ln_bias) + t);
  }
  wait_for_previous_grid();
  let_next_grid_launch();
  // 2. LayerNorm, fc1, GeLU.
  decode::layernorm_block<T, kRows>(in, gamma, beta, ln_eps, hidden, xs, red_sum, red_sq);
  for (int i = t; i < rows_here * kWarpsPerBlock * kRows; i += kThreads) (&partial[0][0][0])[i] = 0.0f;
  __syncthreads();
  stream.dot(xs, partial);
  // fc2's rows for thread t's columns: a ring of kInFlight rows in registers (kSharedFc2: in shared memory).
  uint4 ring[decode::kInFlight];
  if constexpr (!kSharedFc2) {
#pragma unroll
    for (int u = 0; u < decode::kInFlight; ++u)
      if (t < vectors && u < rows_here) ring[u] = __ldg(fc2_source + static_cast<int64_t>(u) * vectors + t);
  }
  __syncthreads();
  for (int i = t; i < rows_here * kRows; i += kThreads) {
    const int r = i % rows_here, m = i / rows_here;
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarpsPerBlock; ++w) total += partial[r][w][m];
    const float v = decode::round_to<T>(total + (fc1_bias ? load_f(fc1_bias + k0 + r) : 0.0f));
    act[m * slice_rows + r] = decode::round_to<T>(gelu == static_cast<int>(DecodeGelu::erf) ? decode::gelu_erf(v)
                                                                                            : decode::gelu_tanh(v));
  }
  if constexpr (kSharedFc2) asm volatile("cp.async.wait_all;\n" ::);
  __syncthreads();
  // 3. The block's part of fc2: thread t owns output columns [t kVec, (t + 1) kVec).
  auto* barrier = static_cast<GridBarrier*>(workspace);
  float* partials = reinterpret_cast<float*>(static_cast<unsigned char*>(workspace) + kBarrierBytes);  // [blocks][kRows][hidden]
  for (int c = t; c < vectors; c += kThreads) {
    float acc[kRows][kVec];
#pragma unroll
    for (int m = 0; m < kRows; ++m)
#pragma unroll
      for (int e = 0; e < kVec; ++e) acc[m][e] = 0.0f;
    const auto add_row = [&](int r, const uint4& raw) {
      float w[kVec];
      decode::unpack<T>(raw, w);
#pragma unroll
      for (int m = 0; m < kRows; ++m) {
        const float a = act[m * slice_rows + r];
#pragma unroll
        for (int e = 0; e < kVec; ++e) acc[m][e] += w[e] * a;
      }
    };
    if constexpr (kSharedFc2) {
      for (int r = 0; r < rows_here; ++r)
        add_row(r, *reinterpret_cast<const uint4*>(fc2_rows + static_cast<int64_t>(r) * hidden + c * kVec));
    } else {  // c == t (hidden <= kThreads * kVec)
      for (int base = 0; base < rows_here; base += decode::kInFlight) {
#pragma unroll
        for (int u = 0; u < decode::kInFlight; ++u) {
          const int r = base + u;
          if (r >= rows_here) break;
          add_row(r, ring[u]);
          if (r + decode::kInFlight < rows_here)
            ring[u] = __ldg(fc2_source + static_cast<int64_t>(r + decode::kInFlight) * vectors + c);
        }
      }
    }
#pragma unroll
    for (int m = 0; m < kRows; ++m) {
      float4* target = reinterpret_cast<float4*>(partials + (static_cast<int64_t>(blockIdx.x) * kRows + m) * hidden + c * kVec);
#pragma unroll
      for (int q = 0; q < kVec / 4; ++q)
        target[q] = make_float4(acc[m][4 * q], acc[m][4 * q + 1], acc[m][4 * q + 2], acc[m][4 * q + 3]);
    }
  }
  // 4. Every block's partial sums are in; block b finishes output columns [b H / B, (b + 1) H / B), up
  // to kChunk at a time: thread t adds the partial sums of blocks t, t + kThreads, ... (all its loads
  // issued together), the warps' butterflies and then the warps in order add those up.
  grid_barrier(barrier);
  const int lane = t & 31, warp = t >> 5, blocks = static_cast<int>(gridDim.x);
  const int64_t n0 = hidden * blockIdx.x / blocks, n1 = hidden * (blockIdx.x + 1) / blocks;
  for (int64_t chunk = n0; chunk < n1; chunk += kChunk) {
    const int cols = static_cast<int>(min(static_cast<int64_t>(kChunk), n1 - chunk));
    float sum[kRows][kChunk];
#pragma unroll
    for (int m = 0; m < kRows; ++m)
#pragma unroll
      for (int j = 0; j < kChunk; ++j) sum[m][j] = 0.0f;
    for (int b = t; b < blocks; b += kThreads)
#pragma unroll
      for (int m = 0; m < kRows; ++m)
#pragma unroll
        for (int j = 0; j < kChunk; ++j)
          if (j < cols) sum[m][j] += __ldcg(partials + (static_cast<int64_t>(b) * kRows + m) * hidden + chunk + j);
#pragma unroll
    for (int m = 0; m < kRows; ++m)
#pragma unroll
      for (int j = 0; j < kChunk; ++j) {
        const float v = warp_sum(sum[m][j]);
        if (lane == 0) warp_sums[warp][m][j] = v;
      }
    __syncthreads();
    if (t < kRows * cols) {
      const int m = t / cols, j = t % cols;
      const int64_t n = chunk + j;
      float total = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarpsPerBlock; ++w) total += warp_sums[w][m][j];
      const float v = decode::round_to<T>(total + (fc2_bias ? load_f(fc2_bias + n) : 0.0f));  // the linear's output
      store_f(out + m * hidden + n, load_f(in + m * hidden + n) + v);
    }
    __syncthreads();  // warp_sums is reused by the next chunk
  }
}

struct Grid {
  int64_t blocks = 0, slice_rows = 0;
  size_t shared = 0;
};

// One wave: as many blocks as fit on the GPU at once (at most blocks_per_sm a SM when > 0) with the
// FFN rows split evenly over them, each block's fc2 rows in its shared memory. blocks 0: no grid fits.
template <typename T, int kRows, bool kSharedFc2>
Grid plan(const DecodeMlpArgs& a) {
  const void* kernel = reinterpret_cast<const void*>(decode_mlp_kernel<T, kRows, kSharedFc2>);
  // The most dynamic shared memory a block may ask for (the opt-in limit less the kernel's static
  // shared memory), allowed once per kernel instance.
  static const int shared_limit = [kernel] {
    int device = 0, optin = 0;
    TESSERA_CUDA_CHECK(cudaGetDevice(&device));
    TESSERA_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    cudaFuncAttributes attributes = {};
    TESSERA_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
    const int limit = optin - static_cast<int>(attributes.sharedSizeBytes);
    TESSERA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, limit));
    return limit;
  }();
  int per_sm = decode::occupancy(kernel, shared_bytes<T, kRows, kSharedFc2>(1, a.hidden)).first;
  if (a.blocks_per_sm > 0) per_sm = std::min(per_sm, a.blocks_per_sm);
  const int sms = decode::occupancy(kernel, 0).second;
  for (; per_sm >= 1; --per_sm) {
    Grid g;
    const int64_t wave = std::min<int64_t>(static_cast<int64_t>(sms) * per_sm, kMaxBlocks);
    g.slice_rows = (a.ffn + wave - 1) / wave;
    g.blocks = (a.ffn + g.slice_rows - 1) / g.slice_rows;
    g.shared = shared_bytes<T, kRows, kSharedFc2>(g.slice_rows, a.hidden);
    if (g.shared <= static_cast<size_t>(shared_limit) && decode::occupancy(kernel, g.shared).first >= per_sm) return g;
  }
  return Grid{};
}

template <typename T, int kRows>
Grid plan_rows(const DecodeMlpArgs& a) {
  return a.shared_fc2 ? plan<T, kRows, true>(a) : plan<T, kRows, false>(a);
}

template <typename T>
Grid plan_for(const DecodeMlpArgs& a) {
  switch (a.rows) {
    case 1: return plan_rows<T, 1>(a);
    case 2: return plan_rows<T, 2>(a);
    case 3: return plan_rows<T, 3>(a);
    case 4: return plan_rows<T, 4>(a);
    case 5: return plan_rows<T, 5>(a);
    case 6: return plan_rows<T, 6>(a);
    case 7: return plan_rows<T, 7>(a);
    case 8: return plan_rows<T, 8>(a);
    default: return Grid{};
  }
}

template <typename T, int kRows, bool kSharedFc2>
void launch(const DecodeMlpArgs& a, cudaStream_t s) {
  const Grid g = plan<T, kRows, kSharedFc2>(a);
  launch_kernel(a.programmatic, decode_mlp_kernel<T, kRows, kSharedFc2>, dim3(static_cast<unsigned>(g.blocks)),
                dim3(kThreads), g.shared, s, static_cast<const T*>(a.in), static_cast<const T*>(a.ln_weight),
                static_cast<const T*>(a.ln_bias), a.ln_eps, static_cast<const T*>(a.fc1_weight),
                static_cast<const T*>(a.fc1_bias), static_cast<const T*>(a.fc2_weight_t),
                static_cast<const T*>(a.fc2_bias), static_cast<int>(a.gelu), a.workspace, a.hidden, a.ffn,
                static_cast<int>(g.slice_rows), static_cast<T*>(a.out));
}

template <typename T, int kRows>
void launch_rows(const DecodeMlpArgs& a, cudaStream_t s) {
  if (a.shared_fc2) launch<T, kRows, true>(a, s);
  else launch<T, kRows, false>(a, s);
}

template <typename T>
void launch_type(const DecodeMlpArgs& a, cudaStream_t s) {
  switch (a.rows) {
    case 1: launch_rows<T, 1>(a, s); break;
    case 2: launch_rows<T, 2>(a, s); break;
    case 3: launch_rows<T, 3>(a, s); break;
    case 4: launch_rows<T, 4>(a, s); break;
    case 5: launch_rows<T, 5>(a, s); break;
    case 6: launch_rows<T, 6>(a, s); break;
    case 7: launch_rows<T, 7>(a, s); break;
    case 8: launch_rows<T, 8>(a, s); break;
    default: TESSERA_FAIL("decode_mlp_forward: rows ", a.rows, " outside 1..", kSkinnyMaxRows);
  }
}

}  // namespace

size_t decode_mlp_workspace_bytes(DType t, int64_t rows, int64_t hidden, int64_t ffn) {
  DecodeMlpArgs a;
  a.rows = rows, a.hidden = hidden, a.ffn = ffn;
  const Grid g = t == DType::bf16 ? plan_for<__nv_bfloat16>(a) : plan_for<__half>(a);
  return kBarrierBytes + static_cast<size_t>(g.blocks * rows * hidden) * sizeof(float);
}

bool decode_mlp_applies(DType t, const DecodeMlpArgs& a) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (!((t == DType::bf16 || t == DType::f16) && a.rows >= 1 && a.rows <= kSkinnyMaxRows && a.hidden % 8 == 0 &&
        a.hidden >= 8 && a.hidden <= decode::kThreads * 8 && a.ffn >= 1 && a.ln_weight && a.ln_bias && a.workspace &&
        aligned(a.in) && aligned(a.ln_weight) && aligned(a.ln_bias) && aligned(a.fc1_weight) &&
        aligned(a.fc2_weight_t) && aligned(a.workspace)))
    return false;
  const Grid g = t == DType::bf16 ? plan_for<__nv_bfloat16>(a) : plan_for<__half>(a);
  return g.blocks > 0 && a.workspace_bytes >= kBarrierBytes + static_cast<size_t>(g.blocks * a.rows * a.hidden) * sizeof(float);
}

void decode_mlp_forward(DType t, const DecodeMlpArgs& a, cudaStream_t s) {
  TESSERA_CHECK(decode_mlp_applies(t, a), "decode_mlp_forward: shape, dtype or alignment it does not take (",
                dtype_name(t), ", rows ", a.rows, ", hidden ", a.hidden, ", ffn ", a.ffn, ")");
  if (t == DType::bf16) launch_type<__nv_bfloat16>(a, s);
  else launch_type<__half>(a, s);
  TESSERA_KERNEL_LAUNCH_CHECK();
}

}  // namespace tessera::kernels
