// Launch declarations of the fused (FlashAttention-2 style) attention kernels (flash_attention.cu):
// bf16/f16 storage, head_dim 64 or 128, tensor-core math with fp32 softmax/accumulation, no s x s matrix,
// attention dropout drawn inside the kernels (Philox per element, the CPU's masks). On a compute
// capability 9.0 device the common case (no ALiBi, documents or dropout) runs warpgroup-MMA kernels
// instead (kernels/hopper/flash_wgmma.h).
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/kernels.h"
#include "tessera/core/dtype.h"

namespace tessera::kernels {

// qkv [s, b, (na + 2 ng) hn] in Megatron's per-query-group layout, out/dout [s, b, na hn],
// lse f32 [b, na, s] (natural log-sum-exp of the scaled, masked scores; -inf for a row with no key).
struct FlashAttentionArgs {
  int64_t seq = 0, batch = 0, num_heads = 0, num_query_groups = 0, head_dim = 0;
  bool causal = true;
  float softmax_scale = 1.0f;  // 1 / sqrt(head_dim)
  // ALiBi (ops/alibi.h): alibi_heads > 0 adds -slope_h |i - j| to the scaled scores, head h being
  // global head alibi_first_head + h of alibi_heads (slopes computed in the kernel; no bias tensor).
  int64_t alibi_heads = 0, alibi_first_head = 0;
  // Deterministic mode (backward): each key block writes its dQ partial to its own f32 slice of the
  // scratch ([key blocks] x [s, b, na, hn] more) and a second kernel adds the slices in block order,
  // instead of atomics into one accumulator. Bitwise the same on every run.
  bool deterministic = false;
  // Document masking (Megatron's reset_attention_mask): i32 [b, s] on the device, or null. Query i
  // attends key j only when both have the same id; a key tile no query of a block can attend (the
  // tile's ids outside the range of the block's query ids) is skipped.
  const int32_t* document_ids = nullptr;
  // Attention dropout on the probabilities (dropout.p > 0): element (b, h, i, j) is kept with the mask
  // of flat index ((b * dropout_heads + dropout_first_head + h) * s + i) * s + j (+ dropout.offset),
  // the unfused attention's [b, dropout_heads, s, s] probs index, so the masks are the CPU's.
  DropoutArgs dropout;
  int64_t dropout_heads = 0, dropout_first_head = 0;  // dropout_heads 0: num_heads
  // The dropout decisions as the forward records them for the backward (flash_attention_dropout_record_bytes
  // of device memory, null: none): the forward writes them, the backward reads them instead of drawing
  // them again (set the same pointer for both).
  uint32_t* dropout_record = nullptr;
};

// True for the storage dtypes and head dims the kernels are built for (bf16/f16; 64, 128).
bool flash_attention_kernel_exists(DType t, int64_t head_dim);

// key_padding_mask: u8 [b, s] (1 = attend) or null. Pointers must be 16-byte aligned.
void flash_attention_forward(DType t, const void* qkv, const uint8_t* key_padding_mask, const FlashAttentionArgs& a,
                             void* out, float* lse, cudaStream_t s);

// Bytes of the forward's dropout record (head_dim 64 with attention dropout where keys 4j..4j+3 of a
// row share a Philox block: seq and the stream offset multiples of 4), 0 where the kernels keep none
// (the backward then draws the decisions itself). 4 bytes per 32 probabilities of the tiles the
// backward visits.
size_t flash_attention_dropout_record_bytes(const FlashAttentionArgs& a);
// Device scratch the backward needs: an fp32 dq accumulator [s, b, na, hn], per-query statistics (D =
// rowsum(dout * out), the log-sum-exp in the log2 domain) and, with attention dropout and no forward
// record, its decisions as bits (4 bytes per 32 probabilities of the tiles the backward visits).
size_t flash_attention_backward_scratch_bytes(const FlashAttentionArgs& a);
// dqkv [s, b, (na + 2 ng) hn] is overwritten (dk/dv of a group summed over its heads).
void flash_attention_backward(DType t, const void* dout, const void* qkv, const void* out, const float* lse,
                              const uint8_t* key_padding_mask, const FlashAttentionArgs& a, void* dqkv, void* scratch,
                              cudaStream_t s);

}  // namespace tessera::kernels
