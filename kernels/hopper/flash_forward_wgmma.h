// The flash-attention forward on Hopper's warpgroup MMA (kernels/hopper/flash_forward_wgmma.cu), built
// as sm_90a code where the CUDA architectures include 90 (TESSERA_HAVE_WGMMA). flash_attention_forward
// runs it where it applies and falls back to the mma.sync kernel otherwise.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/flash_attention.h"

namespace tessera::kernels::hopper {

// bf16 / f16, head_dim 64 or 128, no ALiBi, document masks or attention dropout, on a compute
// capability 9.0 device, unless TESSERA_FLASH_WGMMA=0 (for A/B measurements).
bool flash_forward_wgmma_applies(DType t, const FlashAttentionArgs& a);
// flash_attention_forward's contract (kernels/flash_attention.h).
void flash_forward_wgmma(DType t, const void* qkv, const uint8_t* key_padding_mask, const FlashAttentionArgs& a,
                         void* out, float* lse, cudaStream_t s);

}  // namespace tessera::kernels::hopper
