// TESSERA_CUDA_CHECK and TESSERA_NCCL_CHECK: every CUDA runtime and NCCL call goes through them; a
// failure throws Error with the library's error string and file:line. Include only in CUDA builds.
#pragma once
#include <cuda_runtime.h>

#include "tessera/core/error.h"

#define TESSERA_CUDA_CHECK(call)                                                                   \
  do {                                                                                            \
    cudaError_t tessera_cuda_rc_ = (call);                                                        \
    if (tessera_cuda_rc_ != cudaSuccess)                                                          \
      TESSERA_FAIL("CUDA call failed: " #call ": ", cudaGetErrorName(tessera_cuda_rc_), ": ",      \
                   cudaGetErrorString(tessera_cuda_rc_));                                         \
  } while (0)

#define TESSERA_NCCL_CHECK(call)                                                                   \
  do {                                                                                            \
    ncclResult_t tessera_nccl_rc_ = (call);                                                       \
    if (tessera_nccl_rc_ != ncclSuccess && tessera_nccl_rc_ != ncclInProgress)                    \
      TESSERA_FAIL("NCCL call failed: " #call ": ", ncclGetErrorString(tessera_nccl_rc_),          \
                   " (set NCCL_DEBUG=WARN for details)");                                         \
  } while (0)
