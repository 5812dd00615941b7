// Embedding lookup (row gather) and its gradient (scatter-add with atomics into the f32 main grad or
// the table's dtype). An id outside [0, vocab) yields a NaN row in forward and is skipped in backward.
// The vocabulary-parallel variants hold rows [first_id, first_id + vocab): other ids give zero rows.
#include <algorithm>

#include "kernels/common.cuh"
#include "kernels/kernels.h"

namespace tessera::kernels {

namespace {

template <typename T>
__global__ void embedding_forward_kernel(const int32_t* ids, int64_t n, const T* table, int64_t vocab, int64_t hidden,
                                         int64_t first_id, float outside, T* out) {
  const int64_t total = n * hidden;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / hidden, col = i % hidden;
    const int64_t id = ids[row] - first_id;
    store_f(out + i, id >= 0 && id < vocab ? load_f(table + id * hidden + col) : outside);
  }
}

__device__ __forceinline__ void atomic_add_f(float* p, float v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add_f(__nv_bfloat16* p, float v) { atomicAdd(p, __float2bfloat16_rn(v)); }
__device__ __forceinline__ void atomic_add_f(__half* p, float v) { atomicAdd(p, __float2half_rn(v)); }

template <typename T, typename G>
__global__ void embedding_backward_kernel(const int32_t* ids, int64_t n, const T* dout, int64_t vocab, int64_t hidden,
                                          int64_t first_id, G* dtable) {
  const int64_t total = n * hidden;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / hidden, col = i % hidden;
    const int64_t id = ids[row] - first_id;
    if (id >= 0 && id < vocab) atomic_add_f(dtable + id * hidden + col, load_f(dout + i));
  }
}

unsigned grid_for(int64_t n) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((n + 255) / 256, 132 * 32)));
}

}  // namespace

void embedding_forward(DType t, const int32_t* ids, int64_t n, const void* table, int64_t vocab, int64_t hidden,
                       void* out, cudaStream_t s) {
  vocab_parallel_embedding_forward(t, ids, n, table, 0, vocab, hidden, out, s, NAN);
}

void vocab_parallel_embedding_forward(DType t, const int32_t* ids, int64_t n, const void* table, int64_t first_id,
                                      int64_t vocab, int64_t hidden, void* out, cudaStream_t s, float outside) {
  if (n * hidden == 0) return;
  TESSERA_DEVICE_FLOAT_SWITCH(t, T, embedding_forward_kernel<T><<<grid_for(n * hidden), 256, 0, s>>>(
      ids, n, static_cast<const T*>(table), vocab, hidden, first_id, outside, static_cast<T*>(out)));
  TESSERA_KERNEL_LAUNCH_CHECK();
}

void embedding_backward(DType t, const int32_t* ids, int64_t n, const void* dout, int64_t vocab, int64_t hidden,
                        DType g, void* dtable, cudaStream_t s) {
  vocab_parallel_embedding_backward(t, ids, n, dout, 0, vocab, hidden, g, dtable, s);
}

void vocab_parallel_embedding_backward(DType t, const int32_t* ids, int64_t n, const void* dout, int64_t first_id,
                                       int64_t vocab, int64_t hidden, DType g, void* dtable, cudaStream_t s) {
  if (n * hidden == 0) return;
  TESSERA_DEVICE_FLOAT_SWITCH(t, T, TESSERA_DEVICE_FLOAT_SWITCH(g, G,
      embedding_backward_kernel<T, G><<<grid_for(n * hidden), 256, 0, s>>>(
          ids, n, static_cast<const T*>(dout), vocab, hidden, first_id, static_cast<G*>(dtable))));
  TESSERA_KERNEL_LAUNCH_CHECK();
}

}  // namespace tessera::kernels
