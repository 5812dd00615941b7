// The flash-attention backward's main kernel on Hopper's warpgroup MMA (sm_90a), for head_dim 64 in
// the forward's common case (no ALiBi or document masks; key padding, causal or not, grouped-query
// heads, attention dropout where its decisions come as words: the forward's record or
// flash_dropout_bits_kernel's). flash_backward_kernel's scheme with wgmma: one warpgroup (128
// threads) takes 64 keys of one (group, sample), warp w owning keys 16 w.., and keeps their dK, dV in
// registers while 64-query tiles of every head of the group stream through two cp.async stages. Per tile:
// S^T = K Q^T and dP^T = V dO^T (wgmma from shared memory), P^T = exp2(S^T - lse2) and
// dS^T = P^T (dP^T - D) in registers, dV += P^T dO and dK += dS^T Q (A from registers, B read
// transposed), then dS^T to shared memory and dQ = dS K (both operands read transposed) added into
// the fp32 accumulator with atomics. dK and dQ get the softmax scale when written. With dropout (Z the
// mask scaled by 1 / (1 - p)): dV += (P Z)^T dO and dS = P (dP Z - D), each thread's decisions one
// 32-bit word per tile in the mma.sync backward's thread order (the accumulator layouts are the same).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "kernels/common.cuh"
#include "kernels/flash_dropout.cuh"
#include "kernels/hopper/flash_tiles.cuh"
#include "kernels/hopper/flash_wgmma.h"

namespace tessera::kernels::hopper {

namespace {

constexpr int kHN = 64, kBK = 64, kBQ = 64;
constexpr int kTileBytes = kBK * kHN * 2;  // every tile: 64 rows x 64 elements = 8 KB
// K, V, two stages of Q and dO, dS^T, two stages of the log2 log-sum-exp and D and of the dropout
// words, alignment slack.
constexpr int kSmemBytes = 7 * kTileBytes + 4 * kBQ * 4 + 2 * kThreads * 4 + 1024;

static_assert(kThreads == kDropoutRecordWords, "a thread reads its word of each dropout record");

struct Params {
  BackwardArgs in;  // the tensors, the statistics and the dropout words (flash_wgmma.h)
  int seq, batch, heads, groups;
  bool causal;
  float scale, scale_log2;
  float keep_scale;  // 1 / (1 - p)
};

template <typename T, Dropout kDropout>
__global__ void __launch_bounds__(kThreads) flash_backward_wgmma_kernel(Params p) {
  static_assert(kDropout == Dropout::none || kDropout == Dropout::bits, "decisions as words only");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int HN = kHN, BK = kBK, BQ = kBQ;
  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~static_cast<uintptr_t>(1023));
  unsigned char* sK = smem;
  unsigned char* sV = sK + kTileBytes;
  unsigned char* sQ = sV + kTileBytes;          // 2 stages
  unsigned char* sdO = sQ + 2 * kTileBytes;     // 2 stages
  unsigned char* sdST = sdO + 2 * kTileBytes;   // dS^T [key][query], swizzled
  float* sLse = reinterpret_cast<float*>(sdST + kTileBytes);  // 2 stages, log2 domain (+inf: no key)
  float* sD = sLse + 2 * BQ;                                  // 2 stages
  uint32_t* sBits = reinterpret_cast<uint32_t*>(sD + 2 * BQ); // 2 stages: Dropout::bits words

  const int key0 = blockIdx.x * BK;
  const int g = blockIdx.y, bi = blockIdx.z;
  const int seq = p.seq, heads = p.heads;
  const int hpg = heads / p.groups;
  const int64_t width = static_cast<int64_t>(heads + 2 * p.groups) * HN;
  const int64_t row_stride = p.batch * width;
  const int64_t out_stride = static_cast<int64_t>(p.batch) * heads * HN;
  const T* group_base = static_cast<const T*>(p.in.qkv) + bi * width + static_cast<int64_t>(g) * (hpg + 2) * HN;
  const T* k_base = group_base + hpg * HN;
  const T* v_base = k_base + HN;
  const T* dout = static_cast<const T*>(p.in.dout);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gr = lane / 4, tq = lane % 4;

  const int q_tiles = (seq + BQ - 1) / BQ;
  const int i_begin = p.causal ? key0 / BQ : 0;
  const int n_i = q_tiles - i_begin;
  const int n_iter = hpg * n_i;

  auto load_stage = [&](int it, int stage) {
    const int hh = it / n_i, i = i_begin + it % n_i, h = g * hpg + hh;
    load_tile<T, HN, BQ>(sQ + stage * kTileBytes, group_base + hh * HN, row_stride, i * BQ, seq);
    load_tile<T, HN, BQ>(sdO + stage * kTileBytes, dout + static_cast<int64_t>(bi) * heads * HN + h * HN, out_stride,
                         i * BQ, seq);
    // the tile's log2-domain log-sum-exp and D (padded to whole tiles: no bounds) in 16-byte copies
    const int64_t stats = (static_cast<int64_t>(bi) * heads + h) * p.in.stats_seq + i * BQ;
    constexpr int kStatChunks = BQ / 4;
    if (threadIdx.x < 2 * kStatChunks) {
      const int c = threadIdx.x % kStatChunks;
      const bool is_d = threadIdx.x >= kStatChunks;
      cp_async16((is_d ? sD : sLse) + stage * BQ + 4 * c, (is_d ? p.in.dsum : p.in.lse2) + stats + 4 * c, true);
    }
    if constexpr (kDropout == Dropout::bits) {  // the tile's decision words: threads 32..63 copy 16 bytes each
      const int64_t record =
          ((static_cast<int64_t>(bi) * heads + h) * p.in.key_blocks + blockIdx.x) * p.in.query_tiles + i;
      if (threadIdx.x >= 32 && threadIdx.x < 32 + kThreads / 4) {
        const int c = threadIdx.x - 32;
        cp_async16(sBits + stage * kThreads + 4 * c, p.in.dropout_bits + record * kThreads + 4 * c, true);
      }
    }
  };

  load_tile<T, HN, BK>(sK, k_base, row_stride, key0, seq);
  load_tile<T, HN, BK>(sV, v_base, row_stride, key0, seq);
  load_stage(0, 0);
  cp_async_commit();

  float dk[HN / 2], dv[HN / 2];
#pragma unroll
  for (int i = 0; i < HN / 2; ++i) dk[i] = dv[i] = 0.0f;
  const int key_a = key0 + warp * 16 + gr, key_b = key_a + 8;
  const uint8_t* mask = p.in.key_padding_mask;
  const uint8_t* mask_row = mask ? mask + static_cast<int64_t>(bi) * seq : nullptr;
  const bool key_ok_a = key_a < seq && (!mask_row || mask_row[key_a]);
  const bool key_ok_b = key_b < seq && (!mask_row || mask_row[key_b]);

  for (int it = 0; it < n_iter; ++it) {
    const int stage = it & 1;
    if (it + 1 < n_iter) {
      load_stage(it + 1, stage ^ 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    fence_proxy_async();
    __syncthreads();
    const int h = g * hpg + it / n_i, q0 = (i_begin + it % n_i) * BQ;
    const unsigned char* q_tile = sQ + stage * kTileBytes;
    const unsigned char* do_tile = sdO + stage * kTileBytes;
    const float* lse_tile = sLse + stage * BQ;
    const float* d_tile = sD + stage * BQ;

    // S^T = K Q^T and dP^T = V dO^T (64 keys x 64 queries)
    float sc[BQ / 2], dp[BQ / 2];
#pragma unroll
    for (int i = 0; i < BQ / 2; ++i) sc[i] = dp[i] = 0.0f;
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < HN / 16; ++kk) {
      wgmma_ss<T, BQ>(sc, k_major<BK>(sK, kk), k_major<BQ>(q_tile, kk), kk > 0);
      wgmma_ss<T, BQ>(dp, k_major<BK>(sV, kk), k_major<BQ>(do_tile, kk), kk > 0);
    }
    wgmma_commit();
    wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < BQ / 2; ++i) fence_register(sc[i]), fence_register(dp[i]);

    // P^T (masked keys, causal, queries without keys -> 0) and dS^T = P^T (dP^T - D)
    const bool need_mask = key0 + BK > seq || (p.causal && key0 + BK - 1 > q0) || mask_row != nullptr;
    uint32_t kept_bits = 0;  // Dropout::bits: bit nt 4 + e of this thread's word
    if constexpr (kDropout == Dropout::bits)
      kept_bits = dropout_record_word(reinterpret_cast<const unsigned char*>(sBits + stage * kThreads), threadIdx.x);
#pragma unroll
    for (int nt = 0; nt < BQ / 8; ++nt) {
      const float2 lse2 = *reinterpret_cast<const float2*>(lse_tile + nt * 8 + 2 * tq);
      const float2 d2 = *reinterpret_cast<const float2*>(d_tile + nt * 8 + 2 * tq);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int ql = nt * 8 + 2 * tq + (e & 1);
        const int key = e < 2 ? key_a : key_b;
        float x = sc[4 * nt + e] * p.scale_log2 - (e & 1 ? lse2.y : lse2.x);
        if (need_mask && !((e < 2 ? key_ok_a : key_ok_b) && !(p.causal && key > q0 + ql))) x = -INFINITY;
        const float prob = fast_exp2(x);  // exp2(-inf) = 0; a query without keys has lse +inf: 0 too
        const float d = e & 1 ? d2.y : d2.x;
        if constexpr (kDropout == Dropout::bits) {
          const float z = prob != 0.0f && ((kept_bits >> (nt * 4 + e)) & 1u) ? p.keep_scale : 0.0f;
          sc[4 * nt + e] = prob * z;
          dp[4 * nt + e] = prob * (dp[4 * nt + e] * z - d);
        } else {
          sc[4 * nt + e] = prob;
          dp[4 * nt + e] = prob * (dp[4 * nt + e] - d);
        }
      }
    }

    // dV += P^T dO, dK += dS^T Q; dS^T to shared memory for dQ
    uint32_t pa[BQ / 16][4], da[BQ / 16][4];
#pragma unroll
    for (int kk = 0; kk < BQ / 16; ++kk) {
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        pa[kk][r] = pack2<T>(sc[8 * kk + 2 * r], sc[8 * kk + 2 * r + 1]);
        da[kk][r] = pack2<T>(dp[8 * kk + 2 * r], dp[8 * kk + 2 * r + 1]);
      }
      // da[kk]: rows key_a (0, 2) / key_b (1, 3), query columns kk 16 + 2 tq (0, 1) / + 8 (2, 3)
      const int ra = warp * 16 + gr, rb = ra + 8;
      *reinterpret_cast<uint32_t*>(sdST + swizzled_offset(ra, 2 * kk) + 4 * tq) = da[kk][0];
      *reinterpret_cast<uint32_t*>(sdST + swizzled_offset(rb, 2 * kk) + 4 * tq) = da[kk][1];
      *reinterpret_cast<uint32_t*>(sdST + swizzled_offset(ra, 2 * kk + 1) + 4 * tq) = da[kk][2];
      *reinterpret_cast<uint32_t*>(sdST + swizzled_offset(rb, 2 * kk + 1) + 4 * tq) = da[kk][3];
    }
#pragma unroll
    for (int i = 0; i < HN / 2; ++i) fence_register(dv[i]), fence_register(dk[i]);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BQ / 16; ++kk) {
      wgmma_rs_tb<T, HN>(dv, pa[kk], n_major<BQ>(do_tile, kk), 1);
      wgmma_rs_tb<T, HN>(dk, da[kk], n_major<BQ>(q_tile, kk), 1);
    }
    wgmma_commit();
    fence_proxy_async();  // dS^T's stores, visible to the dQ wgmma
    __syncthreads();

    // dQ (64 queries x HN) = dS K: A = dS^T read transposed, B = K read transposed
    float dq[HN / 2];
#pragma unroll
    for (int i = 0; i < HN / 2; ++i) dq[i] = 0.0f;
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < BK / 16; ++kk) wgmma_ss_tt<T, HN>(dq, n_major<BK>(sdST, kk), n_major<BK>(sK, kk), kk > 0);
    wgmma_commit();
    wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < HN / 2; ++i) fence_register(dq[i]), fence_register(dv[i]), fence_register(dk[i]);
#pragma unroll
    for (int kk = 0; kk < BQ / 16; ++kk)  // the A fragments stay allocated until their wgmma is done
#pragma unroll
      for (int r = 0; r < 4; ++r) fence_register(pa[kk][r]), fence_register(da[kk][r]);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int q = q0 + warp * 16 + gr + 8 * r;
      if (q < seq) {
        float* acc = p.in.dq_accum + ((static_cast<int64_t>(q) * p.batch + bi) * heads + h) * HN + 2 * tq;
#pragma unroll
        for (int dt = 0; dt < HN / 8; ++dt)
          atomicAdd(reinterpret_cast<float2*>(acc + dt * 8), make_float2(dq[4 * dt + 2 * r], dq[4 * dt + 2 * r + 1]));
      }
    }
    __syncthreads();  // the stage and dS^T are reused next iteration
  }

  T* dgroup = static_cast<T*>(p.in.dqkv) + bi * width + static_cast<int64_t>(g) * (hpg + 2) * HN;
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
            pack2<T>(dk[4 * dt + 2 * r] * p.scale, dk[4 * dt + 2 * r + 1] * p.scale);
        *reinterpret_cast<uint32_t*>(dv_row + dt * 8 + 2 * tq) = pack2<T>(dv[4 * dt + 2 * r], dv[4 * dt + 2 * r + 1]);
      }
    }
  }
#endif
}

template <typename T>
void launch(const BackwardArgs& b, const FlashAttentionArgs& a, cudaStream_t stream) {
  static const bool configured = [] {
    for (const auto kernel :
         {flash_backward_wgmma_kernel<T, Dropout::none>, flash_backward_wgmma_kernel<T, Dropout::bits>})
      TESSERA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
    return true;
  }();
  (void)configured;
  Params p;
  p.in = b;
  p.seq = static_cast<int>(a.seq), p.batch = static_cast<int>(a.batch);
  p.heads = static_cast<int>(a.num_heads), p.groups = static_cast<int>(a.num_query_groups);
  p.causal = a.causal;
  p.scale = a.softmax_scale;
  p.scale_log2 = a.softmax_scale * kLog2e;
  p.keep_scale = a.dropout.p > 0.0 ? make_dropout_rule(a.dropout).keep_scale : 1.0f;
  const dim3 grid(static_cast<unsigned>((a.seq + kBK - 1) / kBK), static_cast<unsigned>(a.num_query_groups),
                  static_cast<unsigned>(a.batch));
  if (a.dropout.p > 0.0) flash_backward_wgmma_kernel<T, Dropout::bits><<<grid, kThreads, kSmemBytes, stream>>>(p);
  else flash_backward_wgmma_kernel<T, Dropout::none><<<grid, kThreads, kSmemBytes, stream>>>(p);
  TESSERA_KERNEL_LAUNCH_CHECK();
}

}  // namespace

bool flash_backward_wgmma_applies(DType t, const FlashAttentionArgs& a) {
  return a.head_dim == kHN && !a.deterministic && flash_forward_wgmma_applies(t, a) &&
         (a.dropout.p <= 0.0 || uses_dropout_bits(a));
}

void flash_backward_wgmma(DType t, const BackwardArgs& b, const FlashAttentionArgs& a, cudaStream_t s) {
  TESSERA_CHECK(flash_backward_wgmma_applies(t, a), "flash_backward_wgmma: a case it does not take");
  TESSERA_CHECK(a.dropout.p <= 0.0 || (b.dropout_bits && b.key_blocks > 0 && b.query_tiles > 0),
                "flash_backward_wgmma: attention dropout needs the dropout words");
  if (t == DType::bf16) launch<__nv_bfloat16>(b, a, s);
  else launch<__half>(b, a, s);
}

}  // namespace tessera::kernels::hopper
