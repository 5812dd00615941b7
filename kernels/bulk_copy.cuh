// Hopper's bulk asynchronous copies (the TMA unit's one-dimensional form, sm_90) from global into shared
// memory, with the transaction-counting mbarrier they complete on: a thread arms the barrier with the
// bytes to come (arrive + expect-tx), the copies count them off as they land, and the threads that read
// the data wait for the barrier's phase to flip. The copies are tracked by the barrier, not by the
// SM's load queue, so a block can have its whole share of a weight matrix in flight at once.
// Sizes and addresses are multiples of 16 bytes. Device functions only; before sm_90 they trap.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace tessera::kernels::bulk {

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// One arrival (the arming thread's) completes a phase, once the expected bytes have landed.
__device__ __forceinline__ void barrier_init(uint64_t* barrier) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(shared_address(barrier)) : "memory");
  // The initialisation visible to the async proxy (the copies) before any copy names the barrier.
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#else
  __trap();
#endif
}

// The arming thread's arrival, announcing `bytes` to come by copies on this barrier.
__device__ __forceinline__ void barrier_arm(uint64_t* barrier, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(barrier)), "r"(bytes)
               : "memory");
#else
  __trap();
#endif
}

// bytes from global src to shared dst, counted off `barrier` as they land.
__device__ __forceinline__ void copy_to_shared(void* dst, const void* src, uint32_t bytes, uint64_t* barrier) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   shared_address(dst)),
               "l"(src), "r"(bytes), "r"(shared_address(barrier))
               : "memory");
#else
  __trap();
#endif
}

// Until the barrier's phase `parity` has completed (its copies' data is then visible to the caller).
__device__ __forceinline__ void barrier_wait(uint64_t* barrier, uint32_t parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(shared_address(barrier)), "r"(parity)
        : "memory");
  }
#else
  __trap();
#endif
}

}  // namespace tessera::kernels::bulk
