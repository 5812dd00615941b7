// The flash-attention kernels on Hopper's warpgroup MMA (kernels/hopper/flash_{forward,backward}_wgmma.cu),
// built as sm_90a code where the CUDA architectures include 90 (TESSERA_HAVE_WGMMA).
// flash_attention_forward / _backward (kernels/flash_attention.cu) run them where they apply and fall
// back to the mma.sync kernels otherwise.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/flash_attention.h"

namespace tessera::kernels::hopper {

// bf16 / f16, head_dim 64 or 128, no ALiBi or document masks, on a compute capability 9.0 device,
// unless TESSERA_FLASH_WGMMA=0 (for A/B measurements).
bool flash_forward_wgmma_applies(DType t, const FlashAttentionArgs& a);
// flash_attention_forward's contract (kernels/flash_attention.h).
void flash_forward_wgmma(DType t, const void* qkv, const uint8_t* key_padding_mask, const FlashAttentionArgs& a,
                         void* out, float* lse, cudaStream_t s);

// The backward's main kernel (dK, dV written, dQ added into dq_accum with fp32 atomics), given the
// statistics flash_attention.cu's prepare kernel wrote: D = rowsum(dout * out) and the log-sum-exp
// in the log2 domain, [b, na, stats_seq] each (padded to whole 64-query tiles).
struct BackwardArgs {
  const void* qkv;
  const void* dout;
  const float* lse2;
  const float* dsum;
  const uint8_t* key_padding_mask;
  void* dqkv;
  float* dq_accum;
  int stats_seq;
  // Attention dropout: flash_dropout_bits_kernel's words ([b, na, key_blocks, query_tiles][kThreads],
  // 64 keys x 64 queries a tile); null without dropout.
  const uint32_t* dropout_bits;
  int key_blocks, query_tiles;
};
// flash_forward_wgmma_applies, head_dim 64, not deterministic mode (dQ's atomics), and without
// dropout or with its decisions as words (uses_dropout_bits: seq and the stream offset multiples of 4).
bool flash_backward_wgmma_applies(DType t, const FlashAttentionArgs& a);
void flash_backward_wgmma(DType t, const BackwardArgs& b, const FlashAttentionArgs& a, cudaStream_t s);

}  // namespace tessera::kernels::hopper
