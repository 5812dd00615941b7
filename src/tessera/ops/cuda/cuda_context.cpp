// The per-process CUDA context (see cuda_context.h).
#include "tessera/ops/cuda/cuda_context.h"

#include <cstdio>

#include "kernels/kernels.h"
#include "tessera/core/cuda_check.h"
#include "tessera/runtime/compute_stream.h"

namespace tessera::ops::cuda {

CudaContext& CudaContext::get() {
  static CudaContext context;
  return context;
}

CudaContext::CudaContext() {
  TESSERA_CUDA_CHECK(cudaGetDevice(&device_));
  stream_ = compute_stream();  // runtime owns it (blocking: ordered with the legacy default stream)
  TESSERA_CUBLAS_CHECK(cublasLtCreate(&lt_));
  TESSERA_CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
  TESSERA_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&device_scalar_), sizeof(double)));
  TESSERA_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&host_scalar_), sizeof(double)));
}

CudaContext::~CudaContext() {
  // At process exit the runtime may already be unloading: release quietly.
  (void)cudaStreamSynchronize(stream_);
  for (void* p : scratch_) (void)cudaFree(p);
  (void)cudaFree(workspace_);
  (void)cudaFree(device_scalar_);
  (void)cudaFreeHost(host_scalar_);
  if (lt_) (void)cublasLtDestroy(lt_);
}

void* CudaContext::scratch(ScratchSlot slot, size_t bytes) {
  const int i = static_cast<int>(slot);
  if (bytes <= scratch_bytes_[i]) return scratch_[i];
  TESSERA_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the old region may still be in use
  if (scratch_[i]) TESSERA_CUDA_CHECK(cudaFree(scratch_[i]));
  scratch_[i] = nullptr;
  scratch_bytes_[i] = 0;
  const size_t rounded = (bytes + (size_t(1) << 20) - 1) & ~((size_t(1) << 20) - 1);
  cudaError_t rc = cudaMalloc(&scratch_[i], rounded);
  if (rc == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    TESSERA_FAIL("out of GPU memory allocating ", rounded, " bytes of op scratch (slot ", i, ")");
  }
  TESSERA_CUDA_CHECK(rc);
  scratch_bytes_[i] = rounded;
  return scratch_[i];
}

double* CudaContext::partials_if_deterministic(int64_t count) {
  if (!deterministic_mode()) return nullptr;
  return static_cast<double*>(scratch(ScratchSlot::reduction_partials, sizeof(double) * static_cast<size_t>(count > 0 ? count : 1)));
}

float* column_sum_scratch(int64_t rows, int64_t cols) {
  const int64_t floats = kernels::column_sum_scratch_floats(rows, cols);
  if (floats == 0) return nullptr;
  return static_cast<float*>(CudaContext::get().scratch(ScratchSlot::column_sums, sizeof(float) * static_cast<size_t>(floats)));
}

}  // namespace tessera::ops::cuda
