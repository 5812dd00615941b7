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
// precomputed as one word per thread and tile, drawn as by quads: the forward's record
// (record_dropout_tile below) or, without one, flash_dropout_bits_kernel's.
enum class Dropout { none, quads, elements, bits };

// Whether a row's first flat index is a multiple of 4 (seq and the stream offset are), so that the
// keys 4j..4j+3 of a row are one Philox block's four decisions.
inline bool dropout_quads(const FlashAttentionArgs& a) { return a.seq % 4 == 0 && a.dropout.offset % 4 == 0; }
// The backward reads its decisions as words (the quads rule): the forward's record or the bits kernel's.
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
// Returns the four decisions (bit e: element e kept by the rule, whatever its probability).
template <Dropout kDropout>
__device__ __forceinline__ uint32_t drop_probabilities(float* s, const DropoutRule& rule, int bi, int dropout_heads,
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
  uint32_t decisions = 0;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    bool keep;
    if constexpr (kDropout == Dropout::quads) {
      keep = rule.keeps_word(words[e]);
    } else {
      const int key = key0 + 2 * tq + (e & 1), row = e < 2 ? row_a : row_b;
      keep = rule.keeps(probs_index(bi, dropout_heads, first_head, h, seq, row, key));
    }
    decisions |= static_cast<uint32_t>(keep) << e;
    s[e] = keep && s[e] != 0.0f ? s[e] * rule.keep_scale : 0.0f;
  }
  return decisions;
}

// Words of one record: the backward's 128 threads (4 warps), one 32-bit word each, stored as 4 planes
// of 128 bytes: plane w holds bits 8 w .. 8 w + 7 of every thread's word (byte t of plane w: thread t's).
constexpr int kDropoutRecordWords = 128;

// A backward thread's word of a record (in shared or global memory), gathered from the 4 planes.
__device__ __forceinline__ uint32_t dropout_record_word(const unsigned char* record, int thread) {
  return static_cast<uint32_t>(record[thread]) | static_cast<uint32_t>(record[kDropoutRecordWords + thread]) << 8 |
         static_cast<uint32_t>(record[2 * kDropoutRecordWords + thread]) << 16 |
         static_cast<uint32_t>(record[3 * kDropoutRecordWords + thread]) << 24;
}

// The forward's record of its dropout decisions for the backward (FlashAttentionArgs::dropout_record):
// one record per (batch, head, 64-key block, 64-query tile) in the order the backward's threads read
// them (flash_attention.cu's dropout_bit_position: thread (kl / 16) 32 + (kl % 8) 4 + (ql % 8) / 2, bit
// (ql / 8) 4 + (kl % 16) / 8 2 + ql % 2 for query ql and key kl of the tile). A forward warp w that holds
// query rows 16 w + lane / 4 (+ 8) of the tile owns bits 8 w .. 8 w + 7 of every word: plane w, which
// it writes in four 32-byte stores. `decisions`: this lane's 32 decisions of one 64-key block, bit
// 4 nt + e for the 8-key chunk nt and accumulator element e (drop_probabilities' result). Every lane
// must call it.
__device__ __forceinline__ void record_dropout_block(uint32_t decisions, int warp, int lane, unsigned char* record) {
  // Thread kw 32 + lane's byte takes keys kl % 8 = lane / 4 (tq = lane / 8, element e & 1 = lane / 4 % 2)
  // of the chunks 2 kw + c, and queries ql % 8 = 2 (lane % 4) + g: from lanes 4 (ql % 8) + tq, g = 0, 1.
  // Shifted by e & 1, the source's bit 8 kw + 4 c + 2 (e >> 1) goes to bit 4 (e >> 1) + 2 c + g of the
  // byte: the even bits of each byte, bits 2 and 4 swapped, then the two sources interleaved.
  const int source = 8 * (lane % 4) + lane / 8;
  const uint32_t odd_key = (lane / 4) % 2;
  uint32_t bytes = 0;  // byte kw: thread kw 32 + lane's
#pragma unroll
  for (int g = 0; g < 2; ++g) {
    const uint32_t x = __shfl_sync(0xffffffffu, decisions, source + 4 * g) >> odd_key;
    const uint32_t even = (x & 0x41414141u) | ((x & 0x04040404u) << 2) | ((x & 0x10101010u) >> 2);
    bytes |= even << g;
  }
  unsigned char* plane = record + warp * kDropoutRecordWords;
#pragma unroll
  for (int kw = 0; kw < 4; ++kw) plane[kw * 32 + lane] = static_cast<unsigned char>(bytes >> (8 * kw));
}

// drop_probabilities' decisions with those of elements outside the sequence cleared (a record holds
// decisions of real queries and keys only, as flash_dropout_bits_kernel's do).
__device__ __forceinline__ uint32_t decisions_in_range(uint32_t decisions, int seq, int row_a, int row_b, int key0,
                                                       int tq) {
  const int key = key0 + 2 * tq;
  const uint32_t rows = (row_a < seq ? 0x3u : 0u) | (row_b < seq ? 0xcu : 0u);
  const uint32_t keys = (key < seq ? 0x5u : 0u) | (key + 1 < seq ? 0xau : 0u);
  return decisions & rows & keys;
}

// A forward's record of one key tile (kBlocks 64-key blocks from key k0, decisions[b] the lane's
// decisions of block b) for its 64-query tile `query_tile` of (batch, head) `bh`: the records
// [bh][key_blocks][query_tiles] the backward visits (causal: key blocks up to the query tile).
template <int kBlocks>
__device__ __forceinline__ void record_dropout_tile(const uint32_t (&decisions)[kBlocks], uint32_t* records,
                                                    int key_blocks, int query_tiles, int64_t bh, int query_tile,
                                                    int k0, bool causal, int warp, int lane) {
#pragma unroll
  for (int b = 0; b < kBlocks; ++b) {
    const int kb = k0 / 64 + b;
    if (kb >= key_blocks || (causal && kb > query_tile)) continue;  // uniform over the block
    record_dropout_block(decisions[b], warp, lane,
                         reinterpret_cast<unsigned char*>(
                             records + ((bh * key_blocks + kb) * query_tiles + query_tile) * kDropoutRecordWords));
  }
}

}  // namespace tessera::kernels
