// Fused causal/non-causal self-attention in the FlashAttention-2 scheme on tensor cores
// (mma.sync m16n8k16, ldmatrix, cp.async): forward (out, per-row log-sum-exp) and backward (dqkv).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/attention_copies.cuh"
#include "kernels/common.cuh"
#include "kernels/flash_attention.h"
#include "kernels/flash_dropout.cuh"
#include "kernels/hopper/flash_wgmma.h"  // declarations; the kernels exist with TESSERA_HAVE_WGMMA
#include "kernels/vec16.cuh"

namespace tessera::kernels {

namespace {

constexpr int kThreads = 128;  // 4 warps
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// ---- PTX helpers -----------------------------------------------------------------------------

template <typename T>
__device__ __forceinline__ void mma16816(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

__device__ __forceinline__ void ldsm_x4(uint32_t* r, const void* smem) {
  const uint32_t address = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

__device__ __forceinline__ void ldsm_x4_trans(uint32_t* r, const void* smem) {
  const uint32_t address = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

// Copies rows [row0, row0 + ROWS) x HN of a strided head view into shared memory (row pitch HN + 8
// elements, which keeps ldmatrix free of bank conflicts); rows >= seq become zeros.
template <typename T, int HN, int ROWS>
__device__ __forceinline__ void load_rows(T* dst, const T* base, int64_t row_stride, int row0, int seq) {
  constexpr int kChunks = HN / 8;  // 16-byte chunks per row
  constexpr int kPitch = HN + 8;
  static_assert((ROWS * kChunks) % kThreads == 0, "tile must split evenly over the block");
#pragma unroll
  for (int k = 0; k < ROWS * kChunks / kThreads; ++k) {
    const int c = threadIdx.x + k * kThreads;
    const int r = c / kChunks, col = (c % kChunks) * 8;
    const int row = row0 + r;
    const bool valid = row < seq;
    cp_async16(dst + r * kPitch + col, base + static_cast<int64_t>(valid ? row : 0) * row_stride + col, valid);
  }
}

// ALiBi slope of global head `head` of n (ops/alibi.cpp's formula) times log2(e): the bias in the
// kernels' log2 domain. 0 when n == 0 (no ALiBi).
__device__ inline float alibi_slope_log2(int head, int n) {
  if (n <= 0) return 0.0f;
  int p = 1;
  while (p * 2 <= n) p *= 2;
  const float slope = head < p ? exp2f(-8.0f * static_cast<float>(head + 1) / static_cast<float>(p))
                               : exp2f(-8.0f * static_cast<float>(2 * (head - p) + 1) / static_cast<float>(2 * p));
  return slope * kLog2e;
}

// The range [range[0], range[1]] of ids[first, min(first + count, seq)) (ids: one sample's document
// ids), in shared memory; every thread of the block calls it (it synchronizes).
__device__ inline void document_range(const int32_t* ids, int first, int count, int seq, int* range) {
  if (threadIdx.x == 0) range[0] = INT_MAX, range[1] = INT_MIN;
  __syncthreads();
  for (int t = threadIdx.x; t < count && first + t < seq; t += blockDim.x) {
    atomicMin(range, ids[first + t]);
    atomicMax(range + 1, ids[first + t]);
  }
  __syncthreads();
}

// ---- forward ---------------------------------------------------------------------------------

struct ForwardParams {
  const void* qkv;
  const uint8_t* mask;
  const int32_t* documents;  // [b, s] or null
  void* out;
  float* lse;
  int seq, batch, heads, groups;
  bool causal;
  float scale_log2;  // softmax_scale * log2(e)
  int alibi_heads, alibi_first_head;  // alibi_heads 0: no ALiBi
  DropoutRule dropout;  // Dropout::quads / elements kernels only (dropout_quads decides)
  int dropout_heads, dropout_first_head;
  uint32_t* dropout_record;  // FlashAttentionArgs::dropout_record (HN 64), or null
  int key_blocks;            // of the record: 64-key blocks
};

constexpr int kFwdBlockM = 64, kFwdBlockN = 64;

template <typename T, int HN>
constexpr int forward_smem_bytes() {
  return (kFwdBlockM + 4 * kFwdBlockN) * (HN + 8) * static_cast<int>(sizeof(T));
}

// One block: 64 query rows of one (head, batch); each warp owns 16 rows. Key/value tiles of 64 rows
// stream through a two-stage cp.async pipeline; the softmax is online (running max and sum).
// kDropout != none: P's elements are dropped (kept ones scaled by 1 / (1 - p)) after the row sum, before P V.
template <typename T, int HN, Dropout kDropout>
__global__ void __launch_bounds__(kThreads, HN == 64 ? 4 : 1) flash_forward_kernel(ForwardParams p) {
  constexpr int BM = kFwdBlockM, BN = kFwdBlockN, LD = HN + 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);
  T* sK = sQ + BM * LD;      // 2 stages
  T* sV = sK + 2 * BN * LD;  // 2 stages

  const int tile_m = gridDim.x - 1 - blockIdx.x;  // longest (causal) rows first
  const int h = blockIdx.y, bi = blockIdx.z;
  const int seq = p.seq;
  const int hpg = p.heads / p.groups, g = h / hpg;
  const int64_t width = static_cast<int64_t>(p.heads + 2 * p.groups) * HN;
  const int64_t row_stride = p.batch * width;
  const T* qkv = static_cast<const T*>(p.qkv);
  const T* group_base = qkv + bi * width + static_cast<int64_t>(g) * (hpg + 2) * HN;
  const T* q_base = group_base + (h % hpg) * HN;
  const T* k_base = group_base + hpg * HN;
  const T* v_base = k_base + HN;
  const int q0 = tile_m * BM;
  int n_tiles = (seq + BN - 1) / BN;
  if (p.causal) n_tiles = min(n_tiles, (q0 + BM - 1) / BN + 1);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gr = lane / 4, tq = lane % 4;

  load_rows<T, HN, BM>(sQ, q_base, row_stride, q0, seq);
  load_rows<T, HN, BN>(sK, k_base, row_stride, 0, seq);
  load_rows<T, HN, BN>(sV, v_base, row_stride, 0, seq);
  cp_async_commit();

  uint32_t qf[HN / 16][4];
  float o[HN / 8][4];
#pragma unroll
  for (int i = 0; i < HN / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
  const int row_a = q0 + warp * 16 + gr, row_b = row_a + 8;
  const uint8_t* mask_row = p.mask ? p.mask + static_cast<int64_t>(bi) * seq : nullptr;
  const float alibi = alibi_slope_log2(p.alibi_first_head + h, p.alibi_heads);
  // Document masking: the rows' documents, and the range of the block's (to skip key tiles).
  const int32_t* docs = p.documents ? p.documents + static_cast<int64_t>(bi) * seq : nullptr;
  const int doc_a = docs && row_a < seq ? docs[row_a] : -1, doc_b = docs && row_b < seq ? docs[row_b] : -1;
  __shared__ int query_docs[2];
  if (docs) document_range(docs, q0, BM, seq, query_docs);

  for (int j = 0; j < n_tiles; ++j) {
    if (j + 1 < n_tiles) {
      const int stage = (j + 1) & 1;
      load_rows<T, HN, BN>(sK + stage * BN * LD, k_base, row_stride, (j + 1) * BN, seq);
      load_rows<T, HN, BN>(sV + stage * BN * LD, v_base, row_stride, (j + 1) * BN, seq);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if (j == 0) {
#pragma unroll
      for (int kk = 0; kk < HN / 16; ++kk)
        ldsm_x4(qf[kk], sQ + (warp * 16 + (lane % 8) + ((lane / 8) % 2) * 8) * LD + kk * 16 + (lane / 16) * 8);
    }
    if (docs) {  // skip a tile whose keys all lie in other documents (its probabilities are all 0)
      const int key = j * BN + static_cast<int>(threadIdx.x);
      const bool overlaps = threadIdx.x < BN && key < seq && docs[key] >= query_docs[0] && docs[key] <= query_docs[1];
      if (!__syncthreads_or(overlaps)) continue;  // the barrier also ends every read of this stage
    }
    const T* k_tile = sK + (j & 1) * BN * LD;
    const T* v_tile = sV + (j & 1) * BN * LD;

    // S = Q K^T (16 x 64 per warp)
    float sc[BN / 8][4];
#pragma unroll
    for (int i = 0; i < BN / 8; ++i) sc[i][0] = sc[i][1] = sc[i][2] = sc[i][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < HN / 16; ++kk) {
#pragma unroll
      for (int np = 0; np < BN / 16; ++np) {
        uint32_t b[4];
        ldsm_x4(b, k_tile + (np * 16 + (lane % 8) + (lane / 16) * 8) * LD + kk * 16 + ((lane / 8) % 2) * 8);
        mma16816<T>(sc[2 * np], qf[kk], b[0], b[1]);
        mma16816<T>(sc[2 * np + 1], qf[kk], b[2], b[3]);
      }
    }

    // scale (log2 domain) and mask
    const int k0 = j * BN;
    const bool need_mask = k0 + BN > seq || (p.causal && k0 + BN - 1 > q0) || mask_row != nullptr || docs != nullptr;
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = sc[nt][e] * p.scale_log2;
        if (alibi != 0.0f) {
          const int key = k0 + nt * 8 + 2 * tq + (e & 1);
          x -= alibi * static_cast<float>(abs((e < 2 ? row_a : row_b) - key));
        }
        if (need_mask) {
          const int key = k0 + nt * 8 + 2 * tq + (e & 1);
          const int row = e < 2 ? row_a : row_b;
          if (key >= seq || (p.causal && key > row) || (mask_row && !mask_row[key]) ||
              (docs && docs[key] != (e < 2 ? doc_a : doc_b)))
            x = -INFINITY;
        }
        sc[nt][e] = x;
      }
    }

    // online softmax: rows gr (r = 0) and gr + 8 (r = 1); a quad of lanes shares a row
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt) mx = fmaxf(mx, fmaxf(sc[nt][2 * r], sc[nt][2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m_run[r], mx);
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // a row with no key yet keeps p = 0
      const float alpha = fast_exp2(m_run[r] - m_use);
      m_run[r] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt) {
        sc[nt][2 * r] = fast_exp2(sc[nt][2 * r] - m_use);
        sc[nt][2 * r + 1] = fast_exp2(sc[nt][2 * r + 1] - m_use);
        sum += sc[nt][2 * r] + sc[nt][2 * r + 1];
      }
      l_run[r] = l_run[r] * alpha + sum;
#pragma unroll
      for (int dt = 0; dt < HN / 8; ++dt) {
        o[dt][2 * r] *= alpha;
        o[dt][2 * r + 1] *= alpha;
      }
    }

    if constexpr (kDropout != Dropout::none) {  // the row sums above are of the undropped P, as softmax then dropout
      uint32_t decisions[1] = {0};  // the tile's, bit 4 nt + e
      const bool edge = k0 + BN > seq || q0 + BM > seq;  // elements outside the sequence
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt) {
        const uint32_t kept = drop_probabilities<kDropout>(sc[nt], p.dropout, bi, p.dropout_heads,
                                                           p.dropout_first_head, h, seq, row_a, row_b, k0 + nt * 8, tq);
        decisions[0] |= (edge ? decisions_in_range(kept, seq, row_a, row_b, k0 + nt * 8, tq) : kept) << (4 * nt);
      }
      if constexpr (HN == 64 && kDropout == Dropout::quads)  // the record follows the quads rule
        if (p.dropout_record)
          record_dropout_tile(decisions, p.dropout_record, p.key_blocks, gridDim.x,
                              static_cast<int64_t>(bi) * p.heads + h, tile_m, k0, p.causal, warp, lane);
    }

    // O += P V (P from registers: the accumulator layout of two n-tiles is an A fragment)
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      uint32_t a[4];
      a[0] = pack2<T>(sc[2 * kk][0], sc[2 * kk][1]);
      a[1] = pack2<T>(sc[2 * kk][2], sc[2 * kk][3]);
      a[2] = pack2<T>(sc[2 * kk + 1][0], sc[2 * kk + 1][1]);
      a[3] = pack2<T>(sc[2 * kk + 1][2], sc[2 * kk + 1][3]);
#pragma unroll
      for (int dp = 0; dp < HN / 16; ++dp) {
        uint32_t b[4];
        ldsm_x4_trans(b, v_tile + (kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8) * LD + dp * 16 + (lane / 16) * 8);
        mma16816<T>(o[2 * dp], a, b[0], b[1]);
        mma16816<T>(o[2 * dp + 1], a, b[2], b[3]);
      }
    }
    __syncthreads();  // this stage is refilled by the next iteration's prefetch
  }

  T* out = static_cast<T*>(p.out);
  const int64_t out_row = static_cast<int64_t>(p.heads) * HN;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = l_run[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    const int row = r ? row_b : row_a;
    if (row < seq) {
      T* orow = out + (static_cast<int64_t>(row) * p.batch + bi) * out_row + h * HN;
#pragma unroll
      for (int dt = 0; dt < HN / 8; ++dt)
        *reinterpret_cast<uint32_t*>(orow + dt * 8 + 2 * tq) = pack2<T>(o[dt][2 * r] * inv, o[dt][2 * r + 1] * inv);
      if (tq == 0)
        p.lse[(static_cast<int64_t>(bi) * p.heads + h) * seq + row] = l > 0.0f ? m_run[r] * kLn2 + logf(l) : -INFINITY;
    }
  }
}

// ---- backward --------------------------------------------------------------------------------

struct BackwardParams {
  const void* qkv;
  const void* dout;
  const float* lse2;  // the log-sum-exp in the log2 domain, [b, na, stats_seq(s)]
  const float* dsum;  // D = rowsum(dout * out), [b, na, stats_seq(s)]
  const uint8_t* mask;
  const int32_t* documents;  // [b, s] or null
  void* dqkv;
  float* dq_accum;  // [s, b, na, hn]
  float* dq_slices;  // deterministic mode: [key blocks][s, b, na, hn], each key block's dQ partial; else null
  int64_t dq_slice_floats;
  int seq, batch, heads, groups;
  bool causal;
  float scale, scale_log2;
  int alibi_heads, alibi_first_head;  // alibi_heads 0: no ALiBi
  DropoutRule dropout;  // the bits kernel and Dropout::elements
  int dropout_heads, dropout_first_head;
  const uint32_t* dropout_bits;  // Dropout::bits: [b, na, key blocks, query tiles][kThreads] words
  int key_blocks, query_tiles;
};

constexpr int kBwdBlockN = 64;  // keys per block (16 per warp)
int backward_key_blocks(const FlashAttentionArgs& a) { return static_cast<int>((a.seq + kBwdBlockN - 1) / kBwdBlockN); }

template <int HN>
__host__ __device__ constexpr int backward_block_m() { return HN <= 64 ? 64 : 32; }  // queries per inner tile

template <typename T, int HN>
constexpr int backward_smem_bytes() {
  constexpr int BQ = backward_block_m<HN>();
  return (2 * kBwdBlockN + 4 * BQ) * (HN + 8) * static_cast<int>(sizeof(T)) +
         kBwdBlockN * (BQ + 8) * static_cast<int>(sizeof(T)) + 4 * BQ * static_cast<int>(sizeof(float)) +
         2 * BQ * static_cast<int>(sizeof(int32_t)) + 2 * kThreads * static_cast<int>(sizeof(uint32_t));
}

// The backward thread (of kThreads) and bit that hold the dropout decision of query ql and key kl of a
// (key block, query tile) tile: warp kl / 16 owns keys kl; lane gr = kl % 8, key a or b (kl % 16 < 8
// or not), tq = ql % 8 / 2; bit nt 4 + e of its word, e = 2 (key b) + ql % 2, nt = ql / 8.
__device__ __forceinline__ void dropout_bit_position(int ql, int kl, int& thread, int& bit) {
  thread = (kl / 16) * 32 + (kl % 8) * 4 + (ql % 8) / 2;
  bit = (ql / 8) * 4 + ((kl % 16) / 8) * 2 + ql % 2;
}

// Dropout::bits: every dropout decision of the backward's tiles, one kThreads-word record per
// (batch, head, key block, query tile) in the backward's thread order (dropout_bit_position), stored
// as flash_dropout.cuh's four byte planes (the layout the forwards record too). One
// block per tile; each thread draws Philox blocks of four keys of a query (the quads rule: needs seq
// and the stream offset multiples of 4) and sets the kept elements' bits in shared memory. Tiles the
// causal backward never visits are skipped.
template <int BQ>
__global__ void __launch_bounds__(kThreads) flash_dropout_bits_kernel(DropoutRule rule, int dropout_heads,
                                                                      int dropout_first_head, int seq, int heads,
                                                                      bool causal, uint32_t* bits) {
  const int i = blockIdx.x, kb = blockIdx.y, bh = blockIdx.z;
  const int key0 = kb * kBwdBlockN, q0 = i * BQ;
  if (causal && i < key0 / BQ) return;
  const int bi = bh / heads, h = bh % heads;
  __shared__ uint32_t words[kThreads];
  words[threadIdx.x] = 0;
  __syncthreads();
  for (int u = threadIdx.x; u < BQ * (kBwdBlockN / 4); u += kThreads) {
    const int ql = u / (kBwdBlockN / 4), kl0 = 4 * (u % (kBwdBlockN / 4));
    if (q0 + ql >= seq || key0 + kl0 >= seq) continue;
    const uint64_t index = rule.offset + probs_index(bi, dropout_heads, dropout_first_head, h, seq, q0 + ql, key0 + kl0);
    uint32_t drawn[4];
    rule.block_words(index >> 2, drawn);
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      if (!rule.keeps_word(drawn[c])) continue;
      int thread, bit;
      dropout_bit_position(ql, kl0 + c, thread, bit);
      atomicOr(&words[thread], 1u << bit);
    }
  }
  __syncthreads();
  const int64_t record = (static_cast<int64_t>(bh) * gridDim.y + kb) * gridDim.x + i;
  unsigned char* planes = reinterpret_cast<unsigned char*>(bits + record * kThreads);  // flash_dropout.cuh's planes
#pragma unroll
  for (int w = 0; w < 4; ++w)
    planes[w * kThreads + threadIdx.x] = static_cast<unsigned char>(words[threadIdx.x] >> (8 * w));
}

// The backward's per-query statistics, [b, h, seq_pad] each with seq_pad = seq rounded up to
// kStatsPad (whole query tiles, so that the backward copies them with cp.async): D = rowsum(dout *
// out) and the log-sum-exp in the log2 domain (+inf for a query without keys, and for the padding).

constexpr int kStatsPad = 64;
__host__ __device__ inline int stats_seq(int seq) { return (seq + kStatsPad - 1) / kStatsPad * kStatsPad; }

// D[b, h, q] = sum_d dout * out (fp32), lse2[b, h, q] = lse * log2(e), and zeroes the dq
// accumulator, over the padded query range.
template <typename T, int HN>
__global__ void flash_backward_prepare_kernel(const T* dout, const T* out, const float* lse, float* dsum, float* lse2,
                                              float* dq_accum, int seq, int batch, int heads, bool vectors) {
  // HN / 8 threads per (query, batch, head) row, eight consecutive elements each: one 16-byte load of
  // dout and of out, two 16-byte stores of dq_accum's zeros (`vectors`: dout and out 16-byte aligned).
  constexpr int kPer = 8, kThreadsPerRow = HN / kPer;
  static_assert(HN % kPer == 0 && 32 % kThreadsPerRow == 0, "a row's threads lie within one warp");
  const int64_t thread = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t row = thread / kThreadsPerRow;
  const int part = static_cast<int>(thread % kThreadsPerRow);
  const int seq_pad = stats_seq(seq);
  const bool in_grid = row < static_cast<int64_t>(seq_pad) * batch * heads;
  const int h = static_cast<int>(row % heads);
  const int64_t rest = row / heads;
  const int bi = static_cast<int>(rest % batch), q = static_cast<int>(rest / batch);
  const bool real = in_grid && q < seq;
  float sum = 0.0f;
  if (real) {
    const int64_t first = row * HN + part * kPer;
    float a[kPer], b[kPer];
    if (vectors) {
      unpack16<T>(*reinterpret_cast<const uint4*>(dout + first), a);
      unpack16<T>(*reinterpret_cast<const uint4*>(out + first), b);
    } else {
#pragma unroll
      for (int k = 0; k < kPer; ++k) a[k] = load_f(dout + first + k), b[k] = load_f(out + first + k);
    }
#pragma unroll
    for (int k = 0; k < kPer; ++k) sum += a[k] * b[k];
    float4* acc = reinterpret_cast<float4*>(dq_accum + first);
    acc[0] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    acc[1] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
#pragma unroll
  for (int o = kThreadsPerRow / 2; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (!in_grid || part != 0) return;
  const int64_t stat = (static_cast<int64_t>(bi) * heads + h) * seq_pad + q;
  if (!real) {
    dsum[stat] = 0.0f, lse2[stat] = INFINITY;
    return;
  }
  const float l = lse[(static_cast<int64_t>(bi) * heads + h) * seq + q];
  dsum[stat] = sum;
  lse2[stat] = l == -INFINITY ? INFINITY : l * kLog2e;
}

// dqkv's q columns = dq accumulator times the softmax scale (the backward kernel leaves it out of dS),
// rounded to the storage dtype; kPer consecutive elements of a head's row per thread (8: one 16-byte
// store, when dqkv is 16-byte aligned; else 2).
template <typename T, int HN, int kPer>
__global__ void flash_backward_write_dq_kernel(const float* dq_accum, T* dqkv, int64_t groups_of_elements, int heads,
                                               int groups, float scale) {
  static_assert(HN % kPer == 0 && (kPer == 2 || kPer == 8), "whole packs within a head's row");
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= groups_of_elements) return;
  const int64_t e = kPer * i;
  const int d = static_cast<int>(e % HN);
  const int64_t r = e / HN;
  const int h = static_cast<int>(r % heads);
  const int64_t token = r / heads;  // q * batch + bi
  const int hpg = heads / groups;
  const int64_t width = static_cast<int64_t>(heads + 2 * groups) * HN;
  T* dst = dqkv + token * width + (h / hpg) * (hpg + 2) * HN + (h % hpg) * HN + d;
  if constexpr (kPer == 8) {
    const float4 lo = *reinterpret_cast<const float4*>(dq_accum + e);
    const float4 hi = *reinterpret_cast<const float4*>(dq_accum + e + 4);
    *reinterpret_cast<uint4*>(dst) =
        make_uint4(pack2<T>(lo.x * scale, lo.y * scale), pack2<T>(lo.z * scale, lo.w * scale),
                   pack2<T>(hi.x * scale, hi.y * scale), pack2<T>(hi.z * scale, hi.w * scale));
  } else {
    const float2 v = *reinterpret_cast<const float2*>(dq_accum + e);
    *reinterpret_cast<uint32_t*>(dst) = pack2<T>(v.x * scale, v.y * scale);
  }
}

// One block: 64 keys of one (group, batch); each warp owns 16 keys and keeps their dK, dV in
// registers while query tiles of every head of the group stream through (two cp.async stages).
// Per tile: S^T = K Q^T, P^T = exp(S^T - lse), dP^T = V dO^T, dS^T = P^T (dP^T - D), dV += P^T dO,
// dK += dS^T Q, and dQ += dS K through shared memory and fp32 atomics; dK and dQ are multiplied by
// the softmax scale once, when written.
// kDropout != none: with Z the mask scaled by 1 / (1 - p), dV += (P Z)^T dO and dS = P (dP Z - D), D being
// rowsum(dO out) of the dropped output (sum_j P_ij Z_ij dP_ij = dO_i . out_i).
template <typename T, int HN, Dropout kDropout>
__global__ void __launch_bounds__(kThreads) flash_backward_kernel(BackwardParams p) {
  constexpr int BK = kBwdBlockN, BQ = backward_block_m<HN>(), LD = HN + 8, LDS = BQ + 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sK = reinterpret_cast<T*>(smem_raw);
  T* sV = sK + BK * LD;
  T* sQ = sV + BK * LD;        // 2 stages
  T* sdO = sQ + 2 * BQ * LD;   // 2 stages
  T* sdST = sdO + 2 * BQ * LD;  // dS^T [key][query]
  float* sLse = reinterpret_cast<float*>(sdST + BK * LDS);  // 2 stages, log2 domain (+inf: no key)
  float* sD = sLse + 2 * BQ;                                // 2 stages
  int32_t* sDoc = reinterpret_cast<int32_t*>(sD + 2 * BQ);  // 2 stages: the queries' document ids
  uint32_t* sBits = reinterpret_cast<uint32_t*>(sDoc + 2 * BQ);  // 2 stages: Dropout::bits words

  const int key0 = blockIdx.x * BK;
  const int g = blockIdx.y, bi = blockIdx.z;
  const int seq = p.seq, heads = p.heads;
  const int hpg = heads / p.groups;
  const int64_t width = static_cast<int64_t>(heads + 2 * p.groups) * HN;
  const int64_t row_stride = p.batch * width;
  const int64_t out_stride = static_cast<int64_t>(p.batch) * heads * HN;
  const T* group_base = static_cast<const T*>(p.qkv) + bi * width + static_cast<int64_t>(g) * (hpg + 2) * HN;
  const T* k_base = group_base + hpg * HN;
  const T* v_base = k_base + HN;
  const T* dout = static_cast<const T*>(p.dout);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gr = lane / 4, tq = lane % 4;
  const int32_t* docs = p.documents ? p.documents + static_cast<int64_t>(bi) * seq : nullptr;

  const int q_tiles = (seq + BQ - 1) / BQ;
  const int i_begin = p.causal ? key0 / BQ : 0;
  const int n_i = q_tiles - i_begin;
  const int n_iter = hpg * n_i;

  auto load_stage = [&](int it, int stage) {
    const int hh = it / n_i, i = i_begin + it % n_i, h = g * hpg + hh;
    load_rows<T, HN, BQ>(sQ + stage * BQ * LD, group_base + hh * HN, row_stride, i * BQ, seq);
    load_rows<T, HN, BQ>(sdO + stage * BQ * LD, dout + static_cast<int64_t>(bi) * heads * HN + h * HN, out_stride,
                         i * BQ, seq);
    // the tile's log2-domain log-sum-exp and D (padded to whole tiles: no bounds) in 16-byte copies
    const int64_t stats = (static_cast<int64_t>(bi) * heads + h) * stats_seq(seq) + i * BQ;
    constexpr int kStatChunks = BQ / 4;
    if (threadIdx.x < 2 * kStatChunks) {
      const int c = threadIdx.x % kStatChunks;
      const bool is_d = threadIdx.x >= kStatChunks;
      cp_async16((is_d ? sD : sLse) + stage * BQ + 4 * c, (is_d ? p.dsum : p.lse2) + stats + 4 * c, true);
    }
    if (docs)
      for (int t = threadIdx.x; t < BQ; t += kThreads) sDoc[stage * BQ + t] = i * BQ + t < seq ? docs[i * BQ + t] : -1;
    if constexpr (kDropout == Dropout::bits) {  // the tile's decision words: threads 64..95 copy 16 bytes each
      const int c = static_cast<int>(threadIdx.x) - 64;
      if (c >= 0 && c < kThreads / 4) {
        const int64_t record =
            ((static_cast<int64_t>(bi) * heads + h) * p.key_blocks + blockIdx.x) * p.query_tiles + i;
        cp_async16(sBits + stage * kThreads + 4 * c, p.dropout_bits + record * kThreads + 4 * c, true);
      }
    }
  };

  load_rows<T, HN, BK>(sK, k_base, row_stride, key0, seq);
  load_rows<T, HN, BK>(sV, v_base, row_stride, key0, seq);
  load_stage(0, 0);
  cp_async_commit();

  float dk[HN / 8][4], dv[HN / 8][4];
#pragma unroll
  for (int i = 0; i < HN / 8; ++i) {
    dk[i][0] = dk[i][1] = dk[i][2] = dk[i][3] = 0.0f;
    dv[i][0] = dv[i][1] = dv[i][2] = dv[i][3] = 0.0f;
  }
  const int key_a = key0 + warp * 16 + gr, key_b = key_a + 8;
  const uint8_t* mask_row = p.mask ? p.mask + static_cast<int64_t>(bi) * seq : nullptr;
  const bool key_ok_a = key_a < seq && (!mask_row || mask_row[key_a]);
  const bool key_ok_b = key_b < seq && (!mask_row || mask_row[key_b]);
  // Document masking: the keys' documents, and the range of the block's (to skip query tiles).
  const int doc_a = docs && key_a < seq ? docs[key_a] : -1, doc_b = docs && key_b < seq ? docs[key_b] : -1;
  __shared__ int key_docs[2];
  if (docs) document_range(docs, key0, BK, seq, key_docs);

  constexpr int WM = BQ / 16;            // warps along the query rows of the dQ tile
  constexpr int COLS = HN / (4 / WM);    // dQ columns per warp
  const int dq_m0 = (warp % WM) * 16, dq_c0 = (warp / WM) * COLS;

  for (int it = 0; it < n_iter; ++it) {
    const int stage = it & 1;
    if (it + 1 < n_iter) {
      load_stage(it + 1, stage ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const int h = g * hpg + it / n_i, q0 = (i_begin + it % n_i) * BQ;
    const int32_t* doc_tile = sDoc + stage * BQ;
    if (docs) {  // skip a tile whose queries all lie in other documents (its P^T and dS^T are all 0)
      const int t = static_cast<int>(threadIdx.x);
      const bool overlaps = t < BQ && q0 + t < seq && doc_tile[t] >= key_docs[0] && doc_tile[t] <= key_docs[1];
      if (!__syncthreads_or(overlaps)) continue;  // the barrier also ends every read of this stage
    }
    const T* q_tile = sQ + stage * BQ * LD;
    const T* do_tile = sdO + stage * BQ * LD;
    const float* lse_tile = sLse + stage * BQ;
    const float* d_tile = sD + stage * BQ;
    const float alibi = alibi_slope_log2(p.alibi_first_head + h, p.alibi_heads);

    // S^T = K Q^T and dP^T = V dO^T (16 keys x BQ queries per warp)
    float sc[BQ / 8][4], dp[BQ / 8][4];
#pragma unroll
    for (int i = 0; i < BQ / 8; ++i) {
      sc[i][0] = sc[i][1] = sc[i][2] = sc[i][3] = 0.0f;
      dp[i][0] = dp[i][1] = dp[i][2] = dp[i][3] = 0.0f;
    }
#pragma unroll
    for (int kk = 0; kk < HN / 16; ++kk) {
      uint32_t ka[4], va[4];
      const int a_offset = (warp * 16 + (lane % 8) + ((lane / 8) % 2) * 8) * LD + kk * 16 + (lane / 16) * 8;
      ldsm_x4(ka, sK + a_offset);
      ldsm_x4(va, sV + a_offset);
#pragma unroll
      for (int np = 0; np < BQ / 16; ++np) {
        const int b_offset = (np * 16 + (lane % 8) + (lane / 16) * 8) * LD + kk * 16 + ((lane / 8) % 2) * 8;
        uint32_t b[4];
        ldsm_x4(b, q_tile + b_offset);
        mma16816<T>(sc[2 * np], ka, b[0], b[1]);
        mma16816<T>(sc[2 * np + 1], ka, b[2], b[3]);
        ldsm_x4(b, do_tile + b_offset);
        mma16816<T>(dp[2 * np], va, b[0], b[1]);
        mma16816<T>(dp[2 * np + 1], va, b[2], b[3]);
      }
    }

    // P^T (masked keys, causal, rows without keys -> 0) and dS^T = P^T (dP^T - D). Only tiles
    // that cross the diagonal or the sequence end, or with padding / documents, test each element.
    const bool need_mask = key0 + BK > seq || (p.causal && key0 + BK - 1 > q0) || mask_row != nullptr || docs;
    uint32_t kept_bits = 0;  // Dropout::bits: bit nt 4 + e of this thread's word
    if constexpr (kDropout == Dropout::bits)
      kept_bits = dropout_record_word(reinterpret_cast<const unsigned char*>(sBits + stage * kThreads), threadIdx.x);
#pragma unroll
    for (int nt = 0; nt < BQ / 8; ++nt) {
      // the two queries of this lane's columns: log-sum-exp and D of query nt 8 + 2 tq and the next
      const float2 lse2 = *reinterpret_cast<const float2*>(lse_tile + nt * 8 + 2 * tq);
      const float2 d2 = *reinterpret_cast<const float2*>(d_tile + nt * 8 + 2 * tq);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int ql = nt * 8 + 2 * tq + (e & 1);
        const int key = e < 2 ? key_a : key_b;
        float x = sc[nt][e] * p.scale_log2;
        if (alibi != 0.0f) x -= alibi * static_cast<float>(abs(q0 + ql - key));
        x -= e & 1 ? lse2.y : lse2.x;
        if (need_mask) {
          const bool ok = (e < 2 ? key_ok_a : key_ok_b) && !(p.causal && key > q0 + ql) &&
                          !(docs && doc_tile[ql] != (e < 2 ? doc_a : doc_b));
          if (!ok) x = -INFINITY;
        }
        const float prob = fast_exp2(x);  // exp2(-inf) = 0; a query without keys has lse +inf: 0 too
        const float d = e & 1 ? d2.y : d2.x;
        if constexpr (kDropout != Dropout::none) {
          bool keep;
          if constexpr (kDropout == Dropout::bits) keep = prob != 0.0f && ((kept_bits >> (nt * 4 + e)) & 1u);
          else
            keep = prob != 0.0f &&
                   p.dropout.keeps(probs_index(bi, p.dropout_heads, p.dropout_first_head, h, seq, q0 + ql, key));
          const float z = keep ? p.dropout.keep_scale : 0.0f;
          sc[nt][e] = prob * z;
          dp[nt][e] = prob * (dp[nt][e] * z - d);
        } else {
          sc[nt][e] = prob;
          dp[nt][e] = prob * (dp[nt][e] - d);
        }
      }
    }

    // dV += P^T dO, dK += dS^T Q
#pragma unroll
    for (int kk = 0; kk < BQ / 16; ++kk) {
      uint32_t pa[4], da[4];
      pa[0] = pack2<T>(sc[2 * kk][0], sc[2 * kk][1]);
      pa[1] = pack2<T>(sc[2 * kk][2], sc[2 * kk][3]);
      pa[2] = pack2<T>(sc[2 * kk + 1][0], sc[2 * kk + 1][1]);
      pa[3] = pack2<T>(sc[2 * kk + 1][2], sc[2 * kk + 1][3]);
      da[0] = pack2<T>(dp[2 * kk][0], dp[2 * kk][1]);
      da[1] = pack2<T>(dp[2 * kk][2], dp[2 * kk][3]);
      da[2] = pack2<T>(dp[2 * kk + 1][0], dp[2 * kk + 1][1]);
      da[3] = pack2<T>(dp[2 * kk + 1][2], dp[2 * kk + 1][3]);
#pragma unroll
      for (int dd = 0; dd < HN / 16; ++dd) {
        const int b_offset = (kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8) * LD + dd * 16 + (lane / 16) * 8;
        uint32_t b[4];
        ldsm_x4_trans(b, do_tile + b_offset);
        mma16816<T>(dv[2 * dd], pa, b[0], b[1]);
        mma16816<T>(dv[2 * dd + 1], pa, b[2], b[3]);
        ldsm_x4_trans(b, q_tile + b_offset);
        mma16816<T>(dk[2 * dd], da, b[0], b[1]);
        mma16816<T>(dk[2 * dd + 1], da, b[2], b[3]);
      }
      // dS^T to shared memory for the dQ product
      *reinterpret_cast<uint32_t*>(sdST + (warp * 16 + gr) * LDS + kk * 16 + 2 * tq) = da[0];
      *reinterpret_cast<uint32_t*>(sdST + (warp * 16 + gr + 8) * LDS + kk * 16 + 2 * tq) = da[1];
      *reinterpret_cast<uint32_t*>(sdST + (warp * 16 + gr) * LDS + kk * 16 + 8 + 2 * tq) = da[2];
      *reinterpret_cast<uint32_t*>(sdST + (warp * 16 + gr + 8) * LDS + kk * 16 + 8 + 2 * tq) = da[3];
    }
    __syncthreads();

    // dQ[q0 + dq_m0 .. +16, dq_c0 .. + COLS] += dS K (A from dS^T via ldmatrix.trans)
    float dq[COLS / 8][4];
#pragma unroll
    for (int i = 0; i < COLS / 8; ++i) dq[i][0] = dq[i][1] = dq[i][2] = dq[i][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) {
      uint32_t a[4];
      ldsm_x4_trans(a, sdST + (kk * 16 + (lane % 8) + (lane / 16) * 8) * LDS + dq_m0 + ((lane / 8) % 2) * 8);
#pragma unroll
      for (int dd = 0; dd < COLS / 16; ++dd) {
        uint32_t b[4];
        ldsm_x4_trans(b, sK + (kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8) * LD + dq_c0 + dd * 16 + (lane / 16) * 8);
        mma16816<T>(dq[2 * dd], a, b[0], b[1]);
        mma16816<T>(dq[2 * dd + 1], a, b[2], b[3]);
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int q = q0 + dq_m0 + gr + 8 * r;
      if (q < seq) {
        float* acc = (p.dq_slices ? p.dq_slices + blockIdx.x * p.dq_slice_floats : p.dq_accum) +
                     ((static_cast<int64_t>(q) * p.batch + bi) * heads + h) * HN + dq_c0 + 2 * tq;
#pragma unroll
        for (int dt = 0; dt < COLS / 8; ++dt) {
          const float2 v = make_float2(dq[dt][2 * r], dq[dt][2 * r + 1]);
          if (p.dq_slices) *reinterpret_cast<float2*>(acc + dt * 8) = v;  // own slice: no other writer
          else atomicAdd(reinterpret_cast<float2*>(acc + dt * 8), v);
        }
      }
    }
    __syncthreads();  // stage and dS^T are reused next iteration
  }

  T* dgroup = static_cast<T*>(p.dqkv) + bi * width + static_cast<int64_t>(g) * (hpg + 2) * HN;
  T* dk_base = dgroup + hpg * HN;
  T* dv_base = dk_base + HN;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = r ? key_b : key_a;
    if (key < seq) {
      T* dk_row = dk_base + static_cast<int64_t>(key) * row_stride;
      T* dv_row = dv_base + static_cast<int64_t>(key) * row_stride;
#pragma unroll
      for (int dt = 0; dt < HN / 8; ++dt) {
        *reinterpret_cast<uint32_t*>(dk_row + dt * 8 + 2 * tq) =
            pack2<T>(dk[dt][2 * r] * p.scale, dk[dt][2 * r + 1] * p.scale);
        *reinterpret_cast<uint32_t*>(dv_row + dt * 8 + 2 * tq) = pack2<T>(dv[dt][2 * r], dv[dt][2 * r + 1]);
      }
    }
  }
}

// Deterministic mode: dq_accum[i] = sum over key blocks, in block order, of slices[block][i] (the
// slices were zeroed first, so a block that skipped a query tile adds 0).
__global__ void flash_backward_sum_dq_slices_kernel(const float* slices, int64_t slice_floats, int blocks,
                                                    int64_t n, float* dq_accum) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    float acc = 0.0f;
    for (int b = 0; b < blocks; ++b) acc += slices[b * slice_floats + i];
    dq_accum[i] = acc;
  }
}

// ---- host launchers --------------------------------------------------------------------------

template <typename Kernel>
void allow_dynamic_smem(Kernel kernel, int bytes) {
  TESSERA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

template <typename T, int HN>
void launch_forward(const void* qkv, const uint8_t* mask, const FlashAttentionArgs& a, void* out, float* lse,
                    cudaStream_t stream) {
  constexpr int smem = forward_smem_bytes<T, HN>();
  static const bool configured = (allow_dynamic_smem(flash_forward_kernel<T, HN, Dropout::none>, smem),
                                  allow_dynamic_smem(flash_forward_kernel<T, HN, Dropout::quads>, smem),
                                  allow_dynamic_smem(flash_forward_kernel<T, HN, Dropout::elements>, smem), true);
  (void)configured;
  ForwardParams p;
  set_dropout(p, a);
  p.dropout_record = a.dropout_record;
  p.key_blocks = backward_key_blocks(a);
  p.qkv = qkv, p.mask = mask, p.documents = a.document_ids, p.out = out, p.lse = lse;
  p.seq = static_cast<int>(a.seq), p.batch = static_cast<int>(a.batch);
  p.heads = static_cast<int>(a.num_heads), p.groups = static_cast<int>(a.num_query_groups);
  p.causal = a.causal;
  p.scale_log2 = a.softmax_scale * kLog2e;
  p.alibi_heads = static_cast<int>(a.alibi_heads), p.alibi_first_head = static_cast<int>(a.alibi_first_head);
  const dim3 grid(static_cast<unsigned>((a.seq + kFwdBlockM - 1) / kFwdBlockM), static_cast<unsigned>(a.num_heads),
                  static_cast<unsigned>(a.batch));
  if (a.dropout.p <= 0.0) flash_forward_kernel<T, HN, Dropout::none><<<grid, kThreads, smem, stream>>>(p);
  else if (dropout_quads(a)) flash_forward_kernel<T, HN, Dropout::quads><<<grid, kThreads, smem, stream>>>(p);
  else flash_forward_kernel<T, HN, Dropout::elements><<<grid, kThreads, smem, stream>>>(p);
  TESSERA_KERNEL_LAUNCH_CHECK();
}

size_t dq_accum_bytes(const FlashAttentionArgs& a) {
  const size_t bytes = static_cast<size_t>(a.seq * a.batch * a.num_heads * a.head_dim) * sizeof(float);
  return (bytes + 255) / 256 * 256;
}

// The per-query statistics (D, then the log2-domain log-sum-exp) follow dq_accum in the scratch.
size_t stats_bytes(const FlashAttentionArgs& a) {
  const size_t bytes = static_cast<size_t>(a.batch * a.num_heads * stats_seq(static_cast<int>(a.seq))) * sizeof(float);
  return (bytes + 255) / 256 * 256;
}

// The backward draws its dropout decisions in a kernel of their own (Dropout::bits) where the quads
// rule applies: the words follow the statistics in the scratch.
size_t dropout_bits_bytes(const FlashAttentionArgs& a, int block_m) {
  if (!uses_dropout_bits(a) || a.dropout_record) return 0;  // a forward record replaces the bits
  const size_t query_tiles = static_cast<size_t>((a.seq + block_m - 1) / block_m);
  return static_cast<size_t>(a.batch * a.num_heads) * backward_key_blocks(a) * query_tiles * kThreads *
         sizeof(uint32_t);
}
int backward_block_m_of(const FlashAttentionArgs& a) {
  return a.head_dim <= 64 ? backward_block_m<64>() : backward_block_m<128>();
}

// Deterministic mode's dQ slices follow dq_accum, the statistics and the dropout words in the scratch.
size_t dq_slices_offset(const FlashAttentionArgs& a) {
  return dq_accum_bytes(a) + 2 * stats_bytes(a) + dropout_bits_bytes(a, backward_block_m_of(a));
}

// The backward's main kernel on Hopper's warpgroup MMA where it applies (kernels/hopper/flash_wgmma.h);
// false when it does not (or was not built), and the mma.sync kernel runs.
template <typename T>
bool hopper_backward([[maybe_unused]] const hopper::BackwardArgs& b, [[maybe_unused]] const FlashAttentionArgs& a,
                     [[maybe_unused]] cudaStream_t stream) {
#ifdef TESSERA_HAVE_WGMMA
  const DType t = std::is_same_v<T, __nv_bfloat16> ? DType::bf16 : DType::f16;
  if (!hopper::flash_backward_wgmma_applies(t, a)) return false;
  hopper::flash_backward_wgmma(t, b, a, stream);
  return true;
#else
  return false;
#endif
}

template <typename T, int HN>
void launch_backward(const void* dout, const void* qkv, const void* out, const float* lse, const uint8_t* mask,
                     const FlashAttentionArgs& a, void* dqkv, void* scratch, cudaStream_t stream) {
  constexpr int smem = backward_smem_bytes<T, HN>();
  static const bool configured = (allow_dynamic_smem(flash_backward_kernel<T, HN, Dropout::none>, smem),
                                  allow_dynamic_smem(flash_backward_kernel<T, HN, Dropout::bits>, smem),
                                  allow_dynamic_smem(flash_backward_kernel<T, HN, Dropout::elements>, smem), true);
  (void)configured;
  float* dq_accum = static_cast<float*>(scratch);
  float* dsum = reinterpret_cast<float*>(static_cast<char*>(scratch) + dq_accum_bytes(a));
  float* lse2 = reinterpret_cast<float*>(static_cast<char*>(scratch) + dq_accum_bytes(a) + stats_bytes(a));
  const int64_t rows = a.seq * a.batch * a.num_heads;
  const int64_t padded_rows = stats_seq(static_cast<int>(a.seq)) * a.batch * a.num_heads;
  const bool prepare_vectors = aligned16(dout) && aligned16(out);
  constexpr int64_t kPrepareRowsPerBlock = 256 / (HN / 8);
  flash_backward_prepare_kernel<T, HN>
      <<<static_cast<unsigned>((padded_rows + kPrepareRowsPerBlock - 1) / kPrepareRowsPerBlock), 256, 0, stream>>>(
          static_cast<const T*>(dout), static_cast<const T*>(out), lse, dsum, lse2, dq_accum, static_cast<int>(a.seq),
          static_cast<int>(a.batch), static_cast<int>(a.num_heads), prepare_vectors);
  TESSERA_KERNEL_LAUNCH_CHECK();
  BackwardParams p;
  set_dropout(p, a);
  constexpr int BQ = backward_block_m<HN>();
  const int query_tiles = static_cast<int>((a.seq + BQ - 1) / BQ);
  p.key_blocks = backward_key_blocks(a), p.query_tiles = query_tiles;
  p.dropout_bits = a.dropout_record;  // the forward's decisions where it recorded them
  if (uses_dropout_bits(a) && !a.dropout_record) {
    auto* bits = reinterpret_cast<uint32_t*>(static_cast<char*>(scratch) + dq_accum_bytes(a) + 2 * stats_bytes(a));
    const dim3 bits_grid(static_cast<unsigned>(query_tiles), static_cast<unsigned>(p.key_blocks),
                         static_cast<unsigned>(a.batch * a.num_heads));
    flash_dropout_bits_kernel<BQ><<<bits_grid, kThreads, 0, stream>>>(
        p.dropout, p.dropout_heads, p.dropout_first_head, static_cast<int>(a.seq), static_cast<int>(a.num_heads),
        a.causal, bits);
    TESSERA_KERNEL_LAUNCH_CHECK();
    p.dropout_bits = bits;
  }
  p.qkv = qkv, p.dout = dout, p.lse2 = lse2, p.dsum = dsum, p.mask = mask, p.documents = a.document_ids, p.dqkv = dqkv;
  p.dq_accum = dq_accum;
  p.seq = static_cast<int>(a.seq), p.batch = static_cast<int>(a.batch);
  p.heads = static_cast<int>(a.num_heads), p.groups = static_cast<int>(a.num_query_groups);
  p.causal = a.causal;
  p.scale = a.softmax_scale;
  p.scale_log2 = a.softmax_scale * kLog2e;
  p.alibi_heads = static_cast<int>(a.alibi_heads), p.alibi_first_head = static_cast<int>(a.alibi_first_head);
  const dim3 grid(static_cast<unsigned>((a.seq + kBwdBlockN - 1) / kBwdBlockN),
                  static_cast<unsigned>(a.num_query_groups), static_cast<unsigned>(a.batch));
  p.dq_slices = nullptr;
  p.dq_slice_floats = static_cast<int64_t>(dq_accum_bytes(a) / sizeof(float));
  const bool on_hopper = hopper_backward<T>({qkv, dout, lse2, dsum, mask, dqkv, dq_accum, stats_seq(p.seq),
                                             p.dropout_bits, p.key_blocks, p.query_tiles},
                                            a, stream);
  if (a.deterministic) {
    p.dq_slices = reinterpret_cast<float*>(static_cast<char*>(scratch) + dq_slices_offset(a));
    TESSERA_CUDA_CHECK(cudaMemsetAsync(p.dq_slices, 0, grid.x * dq_accum_bytes(a), stream));
  }
  if (!on_hopper) {
    if (a.dropout.p <= 0.0) flash_backward_kernel<T, HN, Dropout::none><<<grid, kThreads, smem, stream>>>(p);
    else if (p.dropout_bits) flash_backward_kernel<T, HN, Dropout::bits><<<grid, kThreads, smem, stream>>>(p);
    else flash_backward_kernel<T, HN, Dropout::elements><<<grid, kThreads, smem, stream>>>(p);
    TESSERA_KERNEL_LAUNCH_CHECK();
  }
  if (a.deterministic) {
    const int64_t n = rows * HN;
    flash_backward_sum_dq_slices_kernel<<<static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 132 * 16)), 256, 0,
                                          stream>>>(p.dq_slices, p.dq_slice_floats, static_cast<int>(grid.x), n,
                                                    dq_accum);
    TESSERA_KERNEL_LAUNCH_CHECK();
  }
  if (aligned16(dqkv)) {
    const int64_t octets = rows * HN / 8;
    flash_backward_write_dq_kernel<T, HN, 8><<<static_cast<unsigned>((octets + 255) / 256), 256, 0, stream>>>(
        dq_accum, static_cast<T*>(dqkv), octets, static_cast<int>(a.num_heads), static_cast<int>(a.num_query_groups),
        a.softmax_scale);
  } else {
    const int64_t pairs = rows * HN / 2;
    flash_backward_write_dq_kernel<T, HN, 2><<<static_cast<unsigned>((pairs + 255) / 256), 256, 0, stream>>>(
        dq_accum, static_cast<T*>(dqkv), pairs, static_cast<int>(a.num_heads), static_cast<int>(a.num_query_groups),
        a.softmax_scale);
  }
  TESSERA_KERNEL_LAUNCH_CHECK();
}

template <typename F>
void dispatch(DType t, int64_t head_dim, F&& f) {
  if (t == DType::bf16) {
    if (head_dim == 64) return f(__nv_bfloat16{}, std::integral_constant<int, 64>{});
    if (head_dim == 128) return f(__nv_bfloat16{}, std::integral_constant<int, 128>{});
  } else if (t == DType::f16) {
    if (head_dim == 64) return f(__half{}, std::integral_constant<int, 64>{});
    if (head_dim == 128) return f(__half{}, std::integral_constant<int, 128>{});
  }
  TESSERA_FAIL("flash attention kernels: no kernel for dtype ", dtype_name(t), " and head_dim ", head_dim,
               " (bf16/f16 with head_dim 64 or 128 only)");
}

}  // namespace

bool flash_attention_kernel_exists(DType t, int64_t head_dim) {
  return (t == DType::bf16 || t == DType::f16) && (head_dim == 64 || head_dim == 128);
}

size_t flash_attention_dropout_record_bytes(const FlashAttentionArgs& a) {
  // The record is the head_dim-64 backward's Dropout::bits words (64-query tiles), which both forward
  // kernels (64-query tiles, 16 rows a warp) write.
  if (a.head_dim != 64 || !uses_dropout_bits(a)) return 0;
  const size_t query_tiles = static_cast<size_t>((a.seq + kFwdBlockM - 1) / kFwdBlockM);
  static_assert(kFwdBlockM == backward_block_m<64>() && kDropoutRecordWords == kThreads, "the record's tiles");
  return static_cast<size_t>(a.batch * a.num_heads) * backward_key_blocks(a) * query_tiles * kDropoutRecordWords *
         sizeof(uint32_t);
}

void flash_attention_forward(DType t, const void* qkv, const uint8_t* key_padding_mask, const FlashAttentionArgs& a,
                             void* out, float* lse, cudaStream_t s) {
  if (a.seq == 0 || a.batch == 0) return;
  TESSERA_CHECK(!a.dropout_record || flash_attention_dropout_record_bytes(a) > 0,
                "flash_attention_forward: a dropout record where the kernels keep none");
#ifdef TESSERA_HAVE_WGMMA
  if (hopper::flash_forward_wgmma_applies(t, a)) return hopper::flash_forward_wgmma(t, qkv, key_padding_mask, a, out, lse, s);
#endif
  dispatch(t, a.head_dim, [&](auto tag, auto hn) {
    launch_forward<decltype(tag), decltype(hn)::value>(qkv, key_padding_mask, a, out, lse, s);
  });
}

size_t flash_attention_backward_scratch_bytes(const FlashAttentionArgs& a) {
  const size_t key_blocks = static_cast<size_t>((a.seq + kBwdBlockN - 1) / kBwdBlockN);
  return dq_slices_offset(a) + (a.deterministic ? key_blocks * dq_accum_bytes(a) : 0);
}

void flash_attention_backward(DType t, const void* dout, const void* qkv, const void* out, const float* lse,
                              const uint8_t* key_padding_mask, const FlashAttentionArgs& a, void* dqkv, void* scratch,
                              cudaStream_t s) {
  if (a.seq == 0 || a.batch == 0) return;
  TESSERA_CHECK(!a.dropout_record || flash_attention_dropout_record_bytes(a) > 0,
                "flash_attention_backward: a dropout record where the kernels keep none");
  dispatch(t, a.head_dim, [&](auto tag, auto hn) {
    launch_backward<decltype(tag), decltype(hn)::value>(dout, qkv, out, lse, key_padding_mask, a, dqkv, scratch, s);
  });
}

}  // namespace tessera::kernels
