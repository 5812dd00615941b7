// Attention dropout inside the flash-attention kernels (kernels/flash_attention.cu and the Hopper
// kernels in kernels/hopper/): the mask's flat index, the compile-time dropout modes, and the drop of
// one 8-key chunk of probabilities held in the m16n8 accumulator layout that the mma.sync and the
// warpgroup-MMA kernels share. The decisions are the CPU reference's (Philox4x32-10, DropoutRule).
#pragma once
#include <cstdint>

#include "kernels/common.cuh"
#include "kernels/flash_attention.h"

namespace tessera::kernels {

// The dropout mask's flat index of (batch bi, head h, query row, key): the unfused attention's probs
// [b, dropout_heads, s, s] index (FlashAttentionArgs::dropout).
__device__ __forceinline__ uint64_t probs_index(int bi, int dropout_heads, int first_head, int h, int seq, int row,
                                                int key) {
  return ((static_cast<uint64_t>(bi) * dropout_heads + first_head + h) * seq + row) * seq + key;
}

// How a kernel drops attention probabilities, fixed at compile time so that the hot kernels carry
// only the code they run (dropout_quads and uses_dropout_bits decide which applies).
// quads: keys 4j..4j+3 of a row share one Philox block; bits (backward only): the decisions come
// precomputed as one word per thread and tile (flash_dropout_bits_kernel), drawn as by quads.
enum class Dropout { none, quads, elements, bits };

// Whether a row's first flat index is a multiple of 4 (seq and the stream offset are), so that the
// keys 4j..4j+3 of a row are one Philox block's four decisions.
inline bool dropout_quads(const FlashAttentionArgs& a) { return a.seq % 4 == 0 && a.dropout.offset % 4 == 0; }
// The backward reads its decisions from flash_dropout_bits_kernel's words (the quads rule).
inline bool uses_dropout_bits(const FlashAttentionArgs& a) { return a.dropout.p > 0.0 && dropout_quads(a); }

// A kernel's dropout parameters (its Params' dropout, dropout_heads, dropout_first_head) from the args.
template <typename Params>
void set_dropout(Params& p, const FlashAttentionArgs& a) {
  p.dropout = make_dropout_rule(a.dropout);
  p.dropout_heads = static_cast<int>(a.dropout_heads > 0 ? a.dropout_heads : a.num_heads);
  p.dropout_first_head = static_cast<int>(a.dropout_first_head);
}

// Drops the probabilities of one 8-key chunk in the accumulator layout of an m16n8 tile: s[e] is the
// probability of row (e < 2 ? row_a : row_b) and key key0 + 2 tq + (e & 1), tq = lane % 4. Kept ones
// are scaled by 1 / (1 - p). Every lane of the warp must call it (quads: lanes exchange words).
template <Dropout kDropout>
__device__ __forceinline__ void drop_probabilities(float* s, const DropoutRule& rule, int bi, int dropout_heads,
                                                   int first_head, int h, int seq, int row_a, int row_b, int key0,
                                                   int tq) {
  static_assert(kDropout == Dropout::quads || kDropout == Dropout::elements, "the forward's modes");
  uint32_t words[4];  // element e's decision word
  if constexpr (kDropout == Dropout::quads) {
    // Keys 2tq, 2tq + 1 of rows a and b: the lane pair (tq even, tq odd) shares two Philox blocks
    // (its four keys of row a, and of row b); the even lane draws row a's, the odd row b's, and
    // each hands the other the two words it needs.
    const bool odd = tq & 1;
    const int quad_key = key0 + 2 * (tq & ~1);
    const uint64_t index =
        rule.offset + probs_index(bi, dropout_heads, first_head, h, seq, odd ? row_b : row_a, quad_key);
    uint32_t drawn[4];
    rule.block_words(index >> 2, drawn);
    const uint32_t got0 = __shfl_xor_sync(0xffffffffu, odd ? drawn[0] : drawn[2], 1);
    const uint32_t got1 = __shfl_xor_sync(0xffffffffu, odd ? drawn[1] : drawn[3], 1);
    words[0] = odd ? got0 : drawn[0], words[1] = odd ? got1 : drawn[1];
    words[2] = odd ? drawn[2] : got0, words[3] = odd ? drawn[3] : got1;
  }
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    bool keep;
    if constexpr (kDropout == Dropout::quads) {
      keep = s[e] != 0.0f && rule.keeps_word(words[e]);
    } else {
      const int key = key0 + 2 * tq + (e & 1), row = e < 2 ? row_a : row_b;
      keep = s[e] != 0.0f && rule.keeps(probs_index(bi, dropout_heads, first_head, h, seq, row, key));
    }
    s[e] = keep ? s[e] * rule.keep_scale : 0.0f;
  }
}

}  // namespace tessera::kernels
