// Embedding lookup (row gather) and its gradient (scatter-add with atomics into the f32 main grad or
// the table's dtype). An id outside [0, vocab) yields a NaN row in forward and is skipped in backward.
// The vocabulary-parallel variants hold rows [first_id, first_id + vocab): other ids give zero rows.
// Deterministic mode (a scratch given): no atomics. The token positions are sorted by id (CUB's stable
// radix sort, so a row's tokens stay in position order); the first thread of each id's run adds its
// tokens' gradients in position order in fp32 onto the row and stores it once: bitwise the CPU
// reference's sequential loop.
#include <cub/device/device_radix_sort.cuh>

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

__global__ void iota_kernel(int32_t* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = static_cast<int32_t>(i);
}

// One thread per (sorted token, column); only the first token of each id's run works.
template <typename T, typename G>
__global__ void sorted_embedding_backward_kernel(const int32_t* sorted_ids, const int32_t* sorted_positions, int64_t n,
                                                 const T* dout, int64_t vocab, int64_t hidden, int64_t first_id,
                                                 G* dtable) {
  const int64_t total = n * hidden;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t k = i / hidden, col = i % hidden;
    const int32_t raw = sorted_ids[k];
    if (k > 0 && sorted_ids[k - 1] == raw) continue;
    const int64_t id = raw - first_id;
    if (id < 0 || id >= vocab) continue;
    G* dst = dtable + id * hidden + col;
    float acc = load_f(dst);
    for (int64_t j = k; j < n && sorted_ids[j] == raw; ++j) acc += load_f(dout + sorted_positions[j] * hidden + col);
    store_f(dst, acc);
  }
}

// Scratch layout: sorted ids, positions, sorted positions (n int32 each, 256-byte aligned), CUB's temp.
size_t align256(size_t bytes) { return (bytes + 255) / 256 * 256; }

size_t cub_sort_bytes(int64_t n) {
  size_t bytes = 0;
  TESSERA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const int32_t*>(nullptr),
                                                      static_cast<int32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                                      static_cast<int32_t*>(nullptr), static_cast<int>(n)));
  return bytes;
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
                        DType g, void* dtable, cudaStream_t s, void* det_scratch) {
  vocab_parallel_embedding_backward(t, ids, n, dout, 0, vocab, hidden, g, dtable, s, det_scratch);
}

size_t embedding_backward_scratch_bytes(int64_t n) { return 3 * align256(sizeof(int32_t) * n) + cub_sort_bytes(n); }

void vocab_parallel_embedding_backward(DType t, const int32_t* ids, int64_t n, const void* dout, int64_t first_id,
                                       int64_t vocab, int64_t hidden, DType g, void* dtable, cudaStream_t s,
                                       void* det_scratch) {
  if (n * hidden == 0) return;
  if (det_scratch) {
    TESSERA_CHECK(n <= INT32_MAX, "deterministic embedding backward: ", n, " tokens exceed the int32 sort");
    char* base = static_cast<char*>(det_scratch);
    const size_t slice = align256(sizeof(int32_t) * n);
    auto* sorted_ids = reinterpret_cast<int32_t*>(base);
    auto* positions = reinterpret_cast<int32_t*>(base + slice);
    auto* sorted_positions = reinterpret_cast<int32_t*>(base + 2 * slice);
    size_t temp_bytes = cub_sort_bytes(n);
    iota_kernel<<<grid_for(n), 256, 0, s>>>(positions, n);
    TESSERA_KERNEL_LAUNCH_CHECK();
    TESSERA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(base + 3 * slice, temp_bytes, ids, sorted_ids, positions,
                                                        sorted_positions, static_cast<int>(n), 0, 32, s));
    TESSERA_DEVICE_FLOAT_SWITCH(t, T, TESSERA_DEVICE_FLOAT_SWITCH(g, G,
        sorted_embedding_backward_kernel<T, G><<<grid_for(n * hidden), 256, 0, s>>>(
            sorted_ids, sorted_positions, n, static_cast<const T*>(dout), vocab, hidden, first_id,
            static_cast<G*>(dtable))));
    TESSERA_KERNEL_LAUNCH_CHECK();
    return;
  }
  TESSERA_DEVICE_FLOAT_SWITCH(t, T, TESSERA_DEVICE_FLOAT_SWITCH(g, G,
      embedding_backward_kernel<T, G><<<grid_for(n * hidden), 256, 0, s>>>(
          ids, n, static_cast<const T*>(dout), vocab, hidden, first_id, static_cast<G*>(dtable))));
  TESSERA_KERNEL_LAUNCH_CHECK();
}

}  // namespace tessera::kernels
