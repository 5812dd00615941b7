// out[r, c] += bias[c] for out [rows, cols]: the row-parallel linear's bias, added once after the
// tensor-parallel reduction (fp32 add, one rounding into the storage dtype).
#include <algorithm>

#include "kernels/common.cuh"
#include "kernels/kernels.h"

namespace tessera::kernels {

namespace {
template <typename T>
__global__ void add_bias_rows_kernel(T* out, const T* bias, int64_t rows, int64_t cols) {
  const int64_t total = rows * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x)
    store_f(out + i, load_f(out + i) + load_f(bias + i % cols));
}
}  // namespace

void add_bias_rows(DType t, void* out, const void* bias, int64_t rows, int64_t cols, cudaStream_t s) {
  if (rows * cols == 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((rows * cols + 255) / 256, 132 * 16));
  TESSERA_DEVICE_FLOAT_SWITCH(t, T, add_bias_rows_kernel<T><<<blocks, 256, 0, s>>>(
      static_cast<T*>(out), static_cast<const T*>(bias), rows, cols));
  TESSERA_KERNEL_LAUNCH_CHECK();
}

}  // namespace tessera::kernels
