// Programmatic dependent launch (sm_90) for the decode step's kernels: a kernel launched with it may
// start while the previous kernel of the stream still runs, so it can issue loads that do not depend
// on that kernel (weights) first, then wait for it before reading what it wrote. Works inside a
// captured CUDA graph. Without the launch attribute (or before sm_90) the device calls are no-ops.
#pragma once
#include <cuda_runtime.h>

#include "tessera/core/cuda_check.h"

namespace tessera::kernels {

// Until the previous grid has finished and its writes are visible.
__device__ __forceinline__ void wait_for_previous_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cudaGridDependencySynchronize();
#endif
}

// The next grid may launch now (it still waits for this one before reading what this one writes).
// Call it only after wait_for_previous_grid: a kernel's reads before its own wait (cached keys, the
// inputs of two kernels back) are safe only while every kernel's predecessor has finished its wait
// when it lets the kernel in. Session 23's early trigger broke that, and a cached-attention parity
// case failed with it (the likely cause; docs/decode-gpu.md).
__device__ __forceinline__ void let_next_grid_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cudaTriggerProgrammaticLaunchCompletion();
#endif
}

// kernel<<<grid, block, shared, s>>>(args...), with programmatic dependent launch when asked.
template <typename Kernel, typename... Args>
void launch_kernel(bool programmatic, Kernel kernel, dim3 grid, dim3 block, size_t shared, cudaStream_t s,
                   Args... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared;
  config.stream = s;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = programmatic ? 1 : 0;
  TESSERA_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, args...));
}

}  // namespace tessera::kernels
