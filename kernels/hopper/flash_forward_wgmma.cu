// The flash-attention forward on Hopper's warpgroup MMA (sm_90a), for the common case: no ALiBi, no
// document masks (key padding, causal or not, grouped-query heads, attention dropout, head_dim 64 or
// 128). One warpgroup (128 threads) takes 64 query rows of one (head, sample): S = Q K^T for a
// tile of keys in one chain of wgmma from shared memory, the online softmax in registers as in
// kernels/flash_attention.cu, then O += P V with P from registers and V read transposed from shared
// memory. Q, K and V tiles are 128-byte swizzled (kernels/hopper/wgmma.cuh) and stream through a
// two-stage cp.async pipeline. Attention dropout drops P after the row sums, before P V, with the
// mma.sync kernel's decisions (kernels/flash_dropout.cuh: the accumulator layouts are the same), and
// records them for the backward where asked (FlashAttentionArgs::dropout_record). The
// same results as flash_forward_kernel up to fp32 summation order (gpu_flash_attention_parity_test
// checks both against the CPU).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "kernels/common.cuh"
#include "kernels/flash_dropout.cuh"
#include "kernels/hopper/flash_wgmma.h"
#include "kernels/hopper/flash_tiles.cuh"

namespace tessera::kernels::hopper {

namespace {

constexpr int kBlockM = 64;

template <int HN>
__host__ __device__ constexpr int block_n() { return HN == 64 ? 128 : 64; }  // keys per tile (register budget)

template <int HN>
constexpr int smem_bytes() {  // Q, two stages of K and V, and the 1024-byte alignment slack
  return (kBlockM + 4 * block_n<HN>()) * HN * 2 + 1024;
}

struct Params {
  const void* qkv;
  const uint8_t* mask;
  void* out;
  float* lse;
  int seq, batch, heads, groups;
  bool causal;
  float scale_log2;
  DropoutRule dropout;  // Dropout::quads / elements kernels only
  int dropout_heads, dropout_first_head;
  uint32_t* dropout_record;  // FlashAttentionArgs::dropout_record (HN 64), or null
  int key_blocks;            // of the record: 64-key blocks
};

template <typename T, int HN, Dropout kDropout>
__global__ void __launch_bounds__(kThreads) flash_forward_wgmma_kernel(Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int BM = kBlockM, BN = block_n<HN>();
  constexpr int kQBytes = BM * HN * 2, kTileBytes = BN * HN * 2;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~static_cast<uintptr_t>(1023));
  unsigned char* sQ = smem;
  unsigned char* sK = sQ + kQBytes;       // 2 stages
  unsigned char* sV = sK + 2 * kTileBytes;  // 2 stages

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

  load_tile<T, HN, BM>(sQ, q_base, row_stride, q0, seq);
  load_tile<T, HN, BN>(sK, k_base, row_stride, 0, seq);
  load_tile<T, HN, BN>(sV, v_base, row_stride, 0, seq);
  cp_async_commit();

  float o[HN / 2];  // m64 x HN accumulator: HN / 8 column chunks x 4
#pragma unroll
  for (int i = 0; i < HN / 2; ++i) o[i] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
  const int row_a = q0 + warp * 16 + gr, row_b = row_a + 8;
  const uint8_t* mask_row = p.mask ? p.mask + static_cast<int64_t>(bi) * seq : nullptr;

  for (int j = 0; j < n_tiles; ++j) {
    if (j + 1 < n_tiles) {
      const int stage = (j + 1) & 1;
      load_tile<T, HN, BN>(sK + stage * kTileBytes, k_base, row_stride, (j + 1) * BN, seq);
      load_tile<T, HN, BN>(sV + stage * kTileBytes, v_base, row_stride, (j + 1) * BN, seq);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    fence_proxy_async();  // the copies just completed, visible to wgmma
    __syncthreads();
    const unsigned char* k_tile = sK + (j & 1) * kTileBytes;
    const unsigned char* v_tile = sV + (j & 1) * kTileBytes;

    // S = Q K^T (64 x BN)
    float s[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) s[i] = 0.0f;  // overwritten (accumulate = 0 at kk = 0)
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < HN / 16; ++kk) wgmma_ss<T, BN>(s, k_major<BM>(sQ, kk), k_major<BN>(k_tile, kk), kk > 0);
    wgmma_commit();
    wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) fence_register(s[i]);

    // scale (log2 domain) and mask
    const int k0 = j * BN;
    const bool need_mask = k0 + BN > seq || (p.causal && k0 + BN - 1 > q0) || mask_row != nullptr;
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = s[4 * nt + e] * p.scale_log2;
        if (need_mask) {
          const int key = k0 + nt * 8 + 2 * tq + (e & 1);
          const int row = e < 2 ? row_a : row_b;
          if (key >= seq || (p.causal && key > row) || (mask_row && !mask_row[key])) x = -INFINITY;
        }
        s[4 * nt + e] = x;
      }
    }

    // online softmax: rows gr (r = 0) and gr + 8 (r = 1) of the warp; a quad of lanes shares a row
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt) mx = fmaxf(mx, fmaxf(s[4 * nt + 2 * r], s[4 * nt + 2 * r + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m_run[r], mx);
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // a row with no key yet keeps p = 0
      const float alpha = fast_exp2(m_run[r] - m_use);
      m_run[r] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt) {
        s[4 * nt + 2 * r] = fast_exp2(s[4 * nt + 2 * r] - m_use);
        s[4 * nt + 2 * r + 1] = fast_exp2(s[4 * nt + 2 * r + 1] - m_use);
        sum += s[4 * nt + 2 * r] + s[4 * nt + 2 * r + 1];
      }
      l_run[r] = l_run[r] * alpha + sum;
#pragma unroll
      for (int dt = 0; dt < HN / 8; ++dt) {
        o[4 * dt + 2 * r] *= alpha;
        o[4 * dt + 2 * r + 1] *= alpha;
      }
    }

    if constexpr (kDropout != Dropout::none) {  // the row sums above are of the undropped P, as softmax then dropout
      uint32_t decisions[BN / 64] = {};  // 64-key block nt / 8's, bit 4 (nt % 8) + e
      const bool edge = k0 + BN > seq || q0 + BM > seq;  // elements outside the sequence
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt) {
        const uint32_t kept = drop_probabilities<kDropout>(&s[4 * nt], p.dropout, bi, p.dropout_heads,
                                                           p.dropout_first_head, h, seq, row_a, row_b, k0 + nt * 8, tq);
        decisions[nt / 8] |= (edge ? decisions_in_range(kept, seq, row_a, row_b, k0 + nt * 8, tq) : kept)
                             << (4 * (nt % 8));
      }
      if constexpr (HN == 64 && kDropout == Dropout::quads)  // the record follows the quads rule
        if (p.dropout_record)
          record_dropout_tile(decisions, p.dropout_record, p.key_blocks, gridDim.x,
                              static_cast<int64_t>(bi) * p.heads + h, tile_m, k0, p.causal, warp, lane);
    }

    // O += P V: P's accumulator layout over two column chunks is a k16 A fragment
    uint32_t a[BN / 16][4];
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      a[kk][0] = pack2<T>(s[8 * kk + 0], s[8 * kk + 1]);
      a[kk][1] = pack2<T>(s[8 * kk + 2], s[8 * kk + 3]);
      a[kk][2] = pack2<T>(s[8 * kk + 4], s[8 * kk + 5]);
      a[kk][3] = pack2<T>(s[8 * kk + 6], s[8 * kk + 7]);
    }
#pragma unroll
    for (int i = 0; i < HN / 2; ++i) fence_register(o[i]);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) wgmma_rs_tb<T, HN>(o, a[kk], n_major<BN>(v_tile, kk), 1);
    wgmma_commit();
    wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < HN / 2; ++i) fence_register(o[i]);
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
        *reinterpret_cast<uint32_t*>(orow + dt * 8 + 2 * tq) =
            pack2<T>(o[4 * dt + 2 * r] * inv, o[4 * dt + 2 * r + 1] * inv);
      if (tq == 0)
        p.lse[(static_cast<int64_t>(bi) * p.heads + h) * seq + row] = l > 0.0f ? m_run[r] * kLn2 + logf(l) : -INFINITY;
    }
  }
#endif
}

template <typename T, int HN>
void launch(const void* qkv, const uint8_t* mask, const FlashAttentionArgs& a, void* out, float* lse,
            cudaStream_t stream) {
  constexpr int smem = smem_bytes<HN>();
  static const bool configured = [] {
    for (const auto kernel : {flash_forward_wgmma_kernel<T, HN, Dropout::none>,
                              flash_forward_wgmma_kernel<T, HN, Dropout::quads>,
                              flash_forward_wgmma_kernel<T, HN, Dropout::elements>})
      TESSERA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    return true;
  }();
  (void)configured;
  Params p;
  p.qkv = qkv, p.mask = mask, p.out = out, p.lse = lse;
  p.seq = static_cast<int>(a.seq), p.batch = static_cast<int>(a.batch);
  p.heads = static_cast<int>(a.num_heads), p.groups = static_cast<int>(a.num_query_groups);
  p.causal = a.causal;
  p.scale_log2 = a.softmax_scale * kLog2e;
  set_dropout(p, a);
  p.dropout_record = a.dropout_record;
  p.key_blocks = static_cast<int>((a.seq + 63) / 64);
  const dim3 grid(static_cast<unsigned>((a.seq + kBlockM - 1) / kBlockM), static_cast<unsigned>(a.num_heads),
                  static_cast<unsigned>(a.batch));
  if (a.dropout.p <= 0.0) flash_forward_wgmma_kernel<T, HN, Dropout::none><<<grid, kThreads, smem, stream>>>(p);
  else if (dropout_quads(a)) flash_forward_wgmma_kernel<T, HN, Dropout::quads><<<grid, kThreads, smem, stream>>>(p);
  else flash_forward_wgmma_kernel<T, HN, Dropout::elements><<<grid, kThreads, smem, stream>>>(p);
  TESSERA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

bool flash_forward_wgmma_applies(DType t, const FlashAttentionArgs& a) {
  if (t != DType::bf16 && t != DType::f16) return false;
  if (a.head_dim != 64 && a.head_dim != 128) return false;
  if (a.alibi_heads > 0 || a.document_ids != nullptr) return false;
  static const bool switched_off = [] {  // read once: this runs at every attention launch
    const char* v = std::getenv("TESSERA_FLASH_WGMMA");
    return v && std::strcmp(v, "0") == 0;
  }();
  return !switched_off && hopper_device();
}

void flash_forward_wgmma(DType t, const void* qkv, const uint8_t* key_padding_mask, const FlashAttentionArgs& a,
                         void* out, float* lse, cudaStream_t s) {
  TESSERA_CHECK(flash_forward_wgmma_applies(t, a), "flash_forward_wgmma: a case it does not take");
  const bool bf16 = t == DType::bf16;
  if (a.head_dim == 64) {
    if (bf16) launch<__nv_bfloat16, 64>(qkv, key_padding_mask, a, out, lse, s);
    else launch<__half, 64>(qkv, key_padding_mask, a, out, lse, s);
  } else {
    if (bf16) launch<__nv_bfloat16, 128>(qkv, key_padding_mask, a, out, lse, s);
    else launch<__half, 128>(qkv, key_padding_mask, a, out, lse, s);
  }
}

}  // namespace tessera::kernels::hopper
