// Bias-gradient column sums dbias[c] += sum_r dout[r, c] (kernels.h). Many rows with a scratch: the
// rows are cut into chunks (a count that depends on the row count only); a block of 32 lanes x
// kRowThreads sums one chunk's rows for 32 column groups (16-byte vectors of columns when the row
// length and base allow, else single columns), each thread its rows in increasing order, then the
// kRowThreads partial sums in thread order, into partial[chunk][c]; a second kernel adds the chunks
// in a fixed order. Fixed order throughout: bitwise the same on every run (deterministic mode too).
// Few rows or no scratch: one block per 32 columns, 32 row threads, in a fixed order as well.
#include <algorithm>

#include "kernels/common.cuh"
#include "kernels/kernels.h"
#include "kernels/vec16.cuh"

namespace tessera::kernels {

namespace {

constexpr int kRowThreads = 8;
constexpr int kRowsInFlight = 8;    // rows a thread requests before adding any (in row order)
constexpr int64_t kChunkRows = 64;  // rows per chunk (at least)
constexpr int64_t kMaxChunks = 256;

int64_t chunks_for(int64_t rows) {
  return std::max<int64_t>(1, std::min<int64_t>(kMaxChunks, rows / kChunkRows));
}

// One block of 32 x 32 threads per 32 columns; threadIdx.y strides over the rows.
template <typename T, typename G>
__global__ void column_sum_kernel(const T* dout, int64_t rows, int64_t cols, G* dbias) {
  __shared__ float partial[32][33];
  const int64_t c = blockIdx.x * 32 + threadIdx.x;
  float acc = 0.0f;
  if (c < cols)
    for (int64_t r = threadIdx.y; r < rows; r += 32) acc += load_f(dout + r * cols + c);
  partial[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float sum = 0.0f;
    for (int k = 0; k < 32; ++k) sum += partial[k][threadIdx.x];
    store_f(dbias + c, load_f(dbias + c) + sum);
  }
}

template <typename T, int N>
struct alignas(sizeof(T) * N) Cols {
  T e[N];
};

// partial[chunk][c] for the columns of group g = blockIdx.x x 32 + lane (columns g N .. g N + N - 1).
template <typename T, int N>
__global__ void column_partials_kernel(const T* dout, int64_t rows, int64_t cols, int64_t chunk_rows,
                                       float* partial) {
  __shared__ float part[kRowThreads][32 * N + 1];
  const int64_t group = blockIdx.x * int64_t(32) + threadIdx.x, groups = cols / N;
  const int64_t begin = blockIdx.y * chunk_rows, end = min(rows, begin + chunk_rows);
  float acc[N];
#pragma unroll
  for (int k = 0; k < N; ++k) acc[k] = 0.0f;
  if (group < groups) {
    const Cols<T, N>* base = reinterpret_cast<const Cols<T, N>*>(dout) + group;
    int64_t r = begin + threadIdx.y;
    for (; r + (kRowsInFlight - 1) * kRowThreads < end; r += kRowsInFlight * kRowThreads) {
      Cols<T, N> rows_in_flight[kRowsInFlight];
#pragma unroll
      for (int i = 0; i < kRowsInFlight; ++i) rows_in_flight[i] = base[(r + i * kRowThreads) * groups];
#pragma unroll
      for (int i = 0; i < kRowsInFlight; ++i)
#pragma unroll
        for (int k = 0; k < N; ++k) acc[k] += load_f(&rows_in_flight[i].e[k]);
    }
    for (; r < end; r += kRowThreads) {
      const Cols<T, N> a = base[r * groups];
#pragma unroll
      for (int k = 0; k < N; ++k) acc[k] += load_f(&a.e[k]);
    }
  }
#pragma unroll
  for (int k = 0; k < N; ++k) part[threadIdx.y][threadIdx.x * N + k] = acc[k];
  __syncthreads();
  const int tid = threadIdx.y * 32 + threadIdx.x;
  for (int j = tid; j < 32 * N; j += 32 * kRowThreads) {
    const int64_t c = blockIdx.x * int64_t(32 * N) + j;
    if (c >= cols) continue;
    float sum = 0.0f;
    for (int y = 0; y < kRowThreads; ++y) sum += part[y][j];
    partial[blockIdx.y * cols + c] = sum;
  }
}

// dbias[c] += the chunks' partial[k][c] in chunk order: a block of 32 columns x 32 threads, thread y
// summing chunks y, y + 32, ... in turn, then the 32 sums in thread order.
template <typename G>
__global__ void add_column_partials_kernel(const float* partial, int64_t chunks, int64_t cols, G* dbias) {
  __shared__ float part[32][33];
  const int64_t c = blockIdx.x * int64_t(32) + threadIdx.x;
  float acc = 0.0f;
  if (c < cols)
    for (int64_t k = threadIdx.y; k < chunks; k += 32) acc += partial[k * cols + c];
  part[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float sum = 0.0f;
    for (int y = 0; y < 32; ++y) sum += part[y][threadIdx.x];
    store_f(dbias + c, load_f(dbias + c) + sum);
  }
}

}  // namespace

int64_t column_sum_scratch_floats(int64_t rows, int64_t cols) {
  const int64_t chunks = chunks_for(rows);
  return chunks > 1 ? chunks * cols : 0;
}

void column_sum_accumulate(DType t, const void* dout, int64_t rows, int64_t cols, DType g, void* dbias, cudaStream_t s,
                           float* scratch) {
  if (cols == 0) return;
  const int64_t chunks = chunks_for(rows);
  if (chunks == 1 || !scratch) {
    const dim3 block(32, 32);
    const unsigned blocks = static_cast<unsigned>((cols + 31) / 32);
    TESSERA_DEVICE_FLOAT_SWITCH(t, T, TESSERA_DEVICE_FLOAT_SWITCH(g, G,
        column_sum_kernel<T, G><<<blocks, block, 0, s>>>(static_cast<const T*>(dout), rows, cols, static_cast<G*>(dbias))));
    TESSERA_KERNEL_LAUNCH_CHECK();
    return;
  }
  const int64_t chunk_rows = (rows + chunks - 1) / chunks;
  TESSERA_DEVICE_FLOAT_SWITCH(t, T, {
    constexpr int kVec = 16 / static_cast<int>(sizeof(T));
    const bool vec = (cols % kVec) == 0 && aligned16(dout);
    if (vec)
      column_partials_kernel<T, kVec><<<dim3(static_cast<unsigned>((cols / kVec + 31) / 32), static_cast<unsigned>(chunks)),
                                        dim3(32, kRowThreads), 0, s>>>(static_cast<const T*>(dout), rows, cols,
                                                                       chunk_rows, scratch);
    else
      column_partials_kernel<T, 1><<<dim3(static_cast<unsigned>((cols + 31) / 32), static_cast<unsigned>(chunks)),
                                     dim3(32, kRowThreads), 0, s>>>(static_cast<const T*>(dout), rows, cols, chunk_rows,
                                                                    scratch);
  });
  TESSERA_KERNEL_LAUNCH_CHECK();
  TESSERA_DEVICE_FLOAT_SWITCH(g, G,
      add_column_partials_kernel<G><<<static_cast<unsigned>((cols + 31) / 32), dim3(32, 32), 0, s>>>(
          scratch, chunks, cols, static_cast<G*>(dbias)));
  TESSERA_KERNEL_LAUNCH_CHECK();
}

}  // namespace tessera::kernels
