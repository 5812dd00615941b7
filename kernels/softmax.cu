// Attention softmax kernels: the fused scaled causal/padded/document masked softmax (one warp per query row,
// fp32 statistics, rows with no key left get zeros), attention-probability dropout, and the softmax
// backward dscores = scale * p * (dprobs - sum p dprobs) with the dropout mask redrawn.
#include <algorithm>

#include "kernels/common.cuh"
#include "kernels/kernels.h"

namespace tessera::kernels {

namespace {

constexpr int kWarpsPerBlock = 8;

unsigned warp_row_blocks(int64_t rows) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock, 132 * 64)));
}

// ALiBi slope of global head `head` of n (ops/alibi.cpp's formula; flash_attention.cu has the same in
// its log2 domain); 0 when n == 0 (no ALiBi).
__device__ inline float alibi_slope(int64_t head, int64_t n) {
  if (n <= 0) return 0.0f;
  int64_t p = 1;
  while (p * 2 <= n) p *= 2;
  return head < p ? exp2f(-8.0f * static_cast<float>(head + 1) / static_cast<float>(p))
                  : exp2f(-8.0f * static_cast<float>(2 * (head - p) + 1) / static_cast<float>(2 * p));
}

// Key j of a row whose query is in document `document` (documents: the sample's ids, or null) and
// padding mask `mask` (or null): kept or masked.
__device__ __forceinline__ bool key_kept(int64_t j, const uint8_t* mask, const int32_t* documents, int32_t document) {
  return (!mask || mask[j]) && (!documents || documents[j] == document);
}

template <typename T>
__global__ void softmax_forward_kernel(T* scores, const uint8_t* key_mask, const int32_t* document_ids, int64_t heads,
                                       int64_t seq, int64_t rows, bool causal, int64_t alibi_heads,
                                       int64_t alibi_first_head) {
  const int lane = threadIdx.x & 31;
  for (int64_t r = blockIdx.x * int64_t(kWarpsPerBlock) + (threadIdx.x >> 5); r < rows;
       r += int64_t(gridDim.x) * kWarpsPerBlock) {
    const int64_t i = r % seq, b = r / seq / heads;
    T* row = scores + r * seq;
    const uint8_t* mask = key_mask ? key_mask + b * seq : nullptr;
    const int32_t* documents = document_ids ? document_ids + b * seq : nullptr;
    const int32_t document = documents ? documents[i] : 0;
    const int64_t key_end = causal ? i + 1 : seq;
    const float slope = alibi_slope(alibi_first_head + (r / seq) % heads, alibi_heads);
    if (slope != 0.0f)  // ALiBi: scores -= slope |i - j| (in place, before the max)
      for (int64_t j = lane; j < key_end; j += 32)
        store_f(row + j, load_f(row + j) - slope * static_cast<float>(i > j ? i - j : j - i));
    __syncwarp();
    float row_max = -INFINITY;
    for (int64_t j = lane; j < key_end; j += 32)
      if (key_kept(j, mask, documents, document)) row_max = fmaxf(row_max, load_f(row + j));
    row_max = warp_max(row_max);
    if (row_max == -INFINITY) {
      for (int64_t j = lane; j < seq; j += 32) store_f(row + j, 0.0f);
      continue;
    }
    float sum = 0.0f;
    for (int64_t j = lane; j < key_end; j += 32)
      if (key_kept(j, mask, documents, document)) sum += __expf(load_f(row + j) - row_max);
    const float inverse = 1.0f / warp_sum(sum);
    for (int64_t j = lane; j < seq; j += 32) {
      const bool allowed = j < key_end && key_kept(j, mask, documents, document);
      store_f(row + j, allowed ? __expf(load_f(row + j) - row_max) * inverse : 0.0f);
    }
  }
}

// rows = batch * seq of one head; probs row (b, head, i); scratch row (b, i).
template <typename T>
__global__ void probs_dropout_kernel(const T* probs, int64_t heads, int64_t head, int64_t seq, int64_t total,
                                     DropoutRule rule, T* dropped) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = e / (seq * seq), within = e % (seq * seq);
    const int64_t flat = (b * heads + head) * seq * seq + within;
    const float p = load_f(probs + flat);
    store_f(dropped + e, p != 0.0f && rule.keeps(static_cast<uint64_t>(flat)) ? p * rule.keep_scale : 0.0f);
  }
}

template <typename T, bool kDropout>
__global__ void softmax_backward_kernel(T* grad, const T* probs, int64_t heads, int64_t head, int64_t seq, int64_t rows,
                                        float scale, DropoutRule rule) {
  const int lane = threadIdx.x & 31;
  for (int64_t r = blockIdx.x * int64_t(kWarpsPerBlock) + (threadIdx.x >> 5); r < rows;
       r += int64_t(gridDim.x) * kWarpsPerBlock) {
    const int64_t b = r / seq, i = r % seq;
    const int64_t probs_row = ((b * heads + head) * seq + i) * seq;
    const T* p = probs + probs_row;
    T* d = grad + r * seq;
    float dot = 0.0f;
    for (int64_t j = lane; j < seq; j += 32) {
      const float pj = load_f(p + j);
      float dj = load_f(d + j);
      if (kDropout) dj = pj != 0.0f && rule.keeps(static_cast<uint64_t>(probs_row + j)) ? dj * rule.keep_scale : 0.0f;
      dot += pj * dj;
    }
    dot = warp_sum(dot);
    for (int64_t j = lane; j < seq; j += 32) {
      const float pj = load_f(p + j);
      float dj = load_f(d + j);
      if (kDropout) dj = pj != 0.0f && rule.keeps(static_cast<uint64_t>(probs_row + j)) ? dj * rule.keep_scale : 0.0f;
      store_f(d + j, scale * pj * (dj - dot));
    }
  }
}

}  // namespace

void attention_softmax_forward(DType t, void* scores_to_probs, const uint8_t* key_padding_mask, int64_t batch,
                               int64_t heads, int64_t seq, bool causal, cudaStream_t s, int64_t alibi_heads,
                               int64_t alibi_first_head, const int32_t* document_ids) {
  const int64_t rows = batch * heads * seq;
  if (rows == 0) return;
  TESSERA_DEVICE_FLOAT_SWITCH(t, T, softmax_forward_kernel<T><<<warp_row_blocks(rows), 32 * kWarpsPerBlock, 0, s>>>(
      static_cast<T*>(scores_to_probs), key_padding_mask, document_ids, heads, seq, rows, causal, alibi_heads,
      alibi_first_head));
  TESSERA_KERNEL_LAUNCH_CHECK();
}

void attention_probs_dropout(DType t, const void* probs, int64_t batch, int64_t heads, int64_t head, int64_t seq,
                             const DropoutArgs& d, void* dropped, cudaStream_t s) {
  const int64_t total = batch * seq * seq;
  if (total == 0) return;
  const DropoutRule rule = make_dropout_rule(d);
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((total + 255) / 256, 132 * 32));
  TESSERA_DEVICE_FLOAT_SWITCH(t, T, probs_dropout_kernel<T><<<blocks, 256, 0, s>>>(
      static_cast<const T*>(probs), heads, head, seq, total, rule, static_cast<T*>(dropped)));
  TESSERA_KERNEL_LAUNCH_CHECK();
}

void attention_softmax_backward(DType t, void* dweights_to_dscores, const void* probs, int64_t batch, int64_t heads,
                                int64_t head, int64_t seq, float scale, const DropoutArgs& d, cudaStream_t s) {
  const int64_t rows = batch * seq;
  if (rows == 0) return;
  const DropoutRule rule = make_dropout_rule(d);
  TESSERA_DEVICE_FLOAT_SWITCH(t, T,
      if (d.p > 0.0)
        softmax_backward_kernel<T, true><<<warp_row_blocks(rows), 32 * kWarpsPerBlock, 0, s>>>(
            static_cast<T*>(dweights_to_dscores), static_cast<const T*>(probs), heads, head, seq, rows, scale, rule);
      else
        softmax_backward_kernel<T, false><<<warp_row_blocks(rows), 32 * kWarpsPerBlock, 0, s>>>(
            static_cast<T*>(dweights_to_dscores), static_cast<const T*>(probs), heads, head, seq, rows, scale, rule));
  TESSERA_KERNEL_LAUNCH_CHECK();
}

}  // namespace tessera::kernels
