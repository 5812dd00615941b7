// The CUDA execution context of this process: one compute stream (ordered with the legacy default
// stream, which Buffer's cudaMemset uses), the cuBLASLt handle with a preallocated workspace, named
// scratch regions that grow on first use only, and a device/pinned-host pair for scalar reductions.
#pragma once
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "tessera/core/error.h"
#include "tessera/ops/deterministic_mode.h"  // every CUDA op reads deterministic_mode() at launch

#define TESSERA_CUBLAS_CHECK(call)                                                              \
  do {                                                                                          \
    cublasStatus_t tessera_cublas_rc_ = (call);                                                 \
    if (tessera_cublas_rc_ != CUBLAS_STATUS_SUCCESS)                                            \
      TESSERA_FAIL("cuBLAS call failed: " #call ": status ", static_cast<int>(tessera_cublas_rc_)); \
  } while (0)

namespace tessera::ops::cuda {

// Scratch regions used at the same time by one op must have different slots.
enum class ScratchSlot {
  attention_weights = 0,
  attention_dscores = 1,
  layernorm_sums = 2,
  flash_attention_backward = 3,
  reduction_partials = 4,  // deterministic mode: per-block partial sums of a scalar reduction
  embedding_sort = 5,      // deterministic mode: the embedding backward's sorted token ids
  column_sums = 6,         // bias-gradient column sums: per-chunk partial sums
  count = 7
};

// The column_sums scratch for kernels::column_sum_accumulate over [rows, cols] (null when it needs none).
float* column_sum_scratch(int64_t rows, int64_t cols);

class CudaContext {
 public:
  static CudaContext& get();  // created on first use for the current device
  ~CudaContext();
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  cudaStream_t stream() const { return stream_; }
  cublasLtHandle_t lt() const { return lt_; }
  void* workspace() const { return workspace_; }
  size_t workspace_bytes() const { return workspace_bytes_; }
  // At least `bytes` of device memory; reallocates (after a stream sync) only when it must grow.
  void* scratch(ScratchSlot slot, size_t bytes);
  // Deterministic mode (ops/deterministic_mode.h): `count` doubles of the reduction_partials slot;
  // null when the mode is off (the kernels then take their atomic paths).
  double* partials_if_deterministic(int64_t count);
  double* device_scalar() const { return device_scalar_; }
  double* host_scalar() const { return host_scalar_; }

 private:
  CudaContext();
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = size_t(32) << 20;
  void* scratch_[static_cast<int>(ScratchSlot::count)] = {};
  size_t scratch_bytes_[static_cast<int>(ScratchSlot::count)] = {};
  double* device_scalar_ = nullptr;
  double* host_scalar_ = nullptr;
};

}  // namespace tessera::ops::cuda
