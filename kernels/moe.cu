// The mixture-of-experts kernels (kernels/moe_kernels.h).
#include <algorithm>

#include "kernels/common.cuh"
#include "kernels/moe_kernels.h"

namespace tessera::kernels {

namespace {

constexpr int kThreads = 256;
constexpr int kMaxTopk = 16;

unsigned blocks_for(int64_t n) { return static_cast<unsigned>(std::max<int64_t>(1, (n + kThreads - 1) / kThreads)); }

// As the CPU reference (ops/moe_router.cpp): exp sums in double, results rounded to float.
__device__ float sigmoid_d(float x) { return static_cast<float>(1.0 / (1.0 + exp(-static_cast<double>(x)))); }

__device__ void softmax_stats(const float* in, int64_t n, float& max, double& sum) {
  max = in[0];
  for (int64_t i = 1; i < n; ++i) max = fmaxf(max, in[i]);
  sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += exp(static_cast<double>(in[i] - max));
}
__device__ float softmax_at(float v, float max, double sum) {
  return static_cast<float>(exp(static_cast<double>(v - max)) / sum);
}

// The score top-k ranks for expert i (softmax post: the logit).
__device__ float selection_score(const float* lr, int64_t i, int score, bool pre, float max, double sum) {
  if (score == 1) return sigmoid_d(lr[i]);
  if (pre) return softmax_at(lr[i], max, sum);
  return lr[i];
}

__global__ void router_forward_kernel(const float* logits, int64_t tokens, int64_t e, int64_t k, int score, bool pre,
                                      int32_t* chosen, float* probs) {
  const int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (t >= tokens) return;
  const float* lr = logits + t * e;
  float max = 0;
  double sum = 1;
  if (score == 0 && pre) softmax_stats(lr, e, max, sum);
  int32_t pick[kMaxTopk];
  float val[kMaxTopk];
  for (int64_t j = 0; j < k; ++j) {
    // The best expert not yet picked; strict > over ascending indices: ties go to the lower index.
    int32_t best = -1;
    float best_v = 0;
    for (int64_t i = 0; i < e; ++i) {
      bool taken = false;
      for (int64_t q = 0; q < j; ++q) taken |= pick[q] == i;
      if (taken) continue;
      const float v = selection_score(lr, i, score, pre, max, sum);
      if (best < 0 || v > best_v) best = static_cast<int32_t>(i), best_v = v;
    }
    pick[j] = best;
    val[j] = best_v;
  }
  int32_t* c = chosen + t * k;
  float* p = probs + t * k;
  for (int64_t j = 0; j < k; ++j) c[j] = pick[j];
  if (score == 0 && !pre) {
    float m;
    double s;
    softmax_stats(val, k, m, s);
    for (int64_t j = 0; j < k; ++j) p[j] = softmax_at(val[j], m, s);
  } else {
    double s = 0;
    for (int64_t j = 0; j < k; ++j) s += p[j] = val[j];
    if (score == 1 && k > 1)
      for (int64_t j = 0; j < k; ++j) p[j] = static_cast<float>(p[j] / s);
  }
}

__global__ void router_backward_kernel(const float* logits, const int32_t* chosen, const float* dprobs,
                                       int64_t tokens, int64_t e, int64_t k, int score, bool pre, float* dlogits) {
  const int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (t >= tokens) return;
  const float* lr = logits + t * e;
  float* dr = dlogits + t * e;
  const int32_t* c = chosen + t * k;
  double dp[kMaxTopk];
  for (int64_t j = 0; j < k; ++j) dp[j] = dprobs[t * k + j];
  for (int64_t i = 0; i < e; ++i) dr[i] = 0.0f;
  if (score == 0 && !pre) {
    float top[kMaxTopk], m;
    double s;
    for (int64_t j = 0; j < k; ++j) top[j] = lr[c[j]];
    softmax_stats(top, k, m, s);
    float p[kMaxTopk];
    double dot = 0;
    for (int64_t j = 0; j < k; ++j) p[j] = softmax_at(top[j], m, s), dot += p[j] * dp[j];
    for (int64_t j = 0; j < k; ++j) dr[c[j]] += static_cast<float>(p[j] * (dp[j] - dot));
  } else if (score == 0) {
    float m;
    double s;
    softmax_stats(lr, e, m, s);
    double dot = 0;
    for (int64_t j = 0; j < k; ++j) dot += softmax_at(lr[c[j]], m, s) * dp[j];
    for (int64_t i = 0; i < e; ++i) dr[i] = static_cast<float>(-softmax_at(lr[i], m, s) * dot);
    for (int64_t j = 0; j < k; ++j) dr[c[j]] += static_cast<float>(softmax_at(lr[c[j]], m, s) * dp[j]);
  } else {
    double sig[kMaxTopk], dsig[kMaxTopk], s = 0;
    for (int64_t j = 0; j < k; ++j) s += sig[j] = sigmoid_d(lr[c[j]]);
    if (k == 1) {
      dsig[0] = dp[0];
    } else {
      double dot = 0;
      for (int64_t j = 0; j < k; ++j) dot += dp[j] * sig[j] / s;
      for (int64_t j = 0; j < k; ++j) dsig[j] = (dp[j] - dot) / s;
    }
    for (int64_t j = 0; j < k; ++j) dr[c[j]] += static_cast<float>(dsig[j] * sig[j] * (1 - sig[j]));
  }
}

__global__ void counts_kernel(const int32_t* chosen, int64_t slots, unsigned long long* counts) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < slots; i += int64_t(gridDim.x) * blockDim.x)
    atomicAdd(counts + chosen[i], 1ull);
}

template <typename T>
__global__ void permute_forward_kernel(const T* x, const int64_t* row_slot, int64_t h, int64_t topk, T* out) {
  const int64_t r = blockIdx.x, slot = row_slot[r];
  T* o = out + r * h;
  if (slot < 0) {
    for (int64_t i = threadIdx.x; i < h; i += blockDim.x) store_f(o + i, 0.0f);
    return;
  }
  const T* in = x + (slot / topk) * h;
  for (int64_t i = threadIdx.x; i < h; i += blockDim.x) o[i] = in[i];
}

// The token's rows (k of them, -1 for none) in ascending order: the CPU reference's summation order.
__device__ int sorted_rows(const int64_t* slot_row, int64_t k, int64_t* rows) {
  int n = 0;
  for (int64_t j = 0; j < k; ++j) {
    const int64_t r = slot_row[j];
    if (r < 0) continue;
    int q = n++;
    while (q > 0 && rows[q - 1] > r) rows[q] = rows[q - 1], --q;
    rows[q] = r;
  }
  return n;
}

template <typename T>
__global__ void permute_backward_kernel(const T* dout, const int64_t* slot_row, int64_t h, int64_t topk, T* dx) {
  const int64_t t = blockIdx.x;
  int64_t rows[kMaxTopk];
  const int n = sorted_rows(slot_row + t * topk, topk, rows);
  for (int64_t i = threadIdx.x; i < h; i += blockDim.x) {
    float acc = 0.0f;
    for (int q = 0; q < n; ++q) acc = __fadd_rn(acc, load_f(dout + rows[q] * h + i));
    store_f(dx + t * h + i, acc);
  }
}

template <typename T>
__global__ void unpermute_forward_kernel(const T* expert_out, const int64_t* slot_row, const float* probs, int64_t h,
                                         int64_t topk, T* y) {
  const int64_t t = blockIdx.x;
  int64_t rows[kMaxTopk];
  float w[kMaxTopk];
  int n = 0;
  {  // rows ascending with their slots' weights
    for (int64_t j = 0; j < topk; ++j) {
      const int64_t r = slot_row[t * topk + j];
      if (r < 0) continue;
      int q = n++;
      while (q > 0 && rows[q - 1] > r) rows[q] = rows[q - 1], w[q] = w[q - 1], --q;
      rows[q] = r, w[q] = probs[t * topk + j];
    }
  }
  for (int64_t i = threadIdx.x; i < h; i += blockDim.x) {
    float acc = 0.0f;
    for (int q = 0; q < n; ++q) acc = __fadd_rn(acc, __fmul_rn(w[q], load_f(expert_out + rows[q] * h + i)));
    store_f(y + t * h + i, acc);
  }
}

template <typename T>
__global__ void unpermute_backward_kernel(const T* dy, const T* expert_out, const int64_t* row_slot,
                                          const float* probs, int64_t h, int64_t topk, T* dexpert_out,
                                          float* dprobs) {
  const int64_t r = blockIdx.x, slot = row_slot[r];
  T* de = dexpert_out + r * h;
  if (slot < 0) {
    for (int64_t i = threadIdx.x; i < h; i += blockDim.x) store_f(de + i, 0.0f);
    return;
  }
  const float w = probs[slot];
  const T* g = dy + (slot / topk) * h;
  const T* e = expert_out + r * h;
  float dot = 0.0f;
  for (int64_t i = threadIdx.x; i < h; i += blockDim.x) {
    const float gi = load_f(g + i);
    store_f(de + i, w * gi);
    dot += gi * load_f(e + i);
  }
  dot = block_reduce<false>(dot);
  if (threadIdx.x == 0) dprobs[slot] = dot;
}

}  // namespace

void moe_router_forward(const float* logits, int64_t tokens, int64_t experts, int64_t topk, int score,
                        bool pre_softmax, int32_t* chosen, float* probs, cudaStream_t s) {
  if (tokens == 0) return;
  TESSERA_CHECK(topk >= 1 && topk <= kMaxTopk, "moe_router_forward: CUDA top-k takes 1 .. ", kMaxTopk, ", got ", topk);
  router_forward_kernel<<<blocks_for(tokens), kThreads, 0, s>>>(logits, tokens, experts, topk, score, pre_softmax,
                                                                chosen, probs);
  TESSERA_KERNEL_LAUNCH_CHECK();
}

void moe_router_backward(const float* logits, const int32_t* chosen, const float* dprobs, int64_t tokens,
                         int64_t experts, int64_t topk, int score, bool pre_softmax, float* dlogits, cudaStream_t s) {
  if (tokens == 0) return;
  TESSERA_CHECK(topk >= 1 && topk <= kMaxTopk, "moe_router_backward: CUDA top-k takes 1 .. ", kMaxTopk, ", got ", topk);
  router_backward_kernel<<<blocks_for(tokens), kThreads, 0, s>>>(logits, chosen, dprobs, tokens, experts, topk, score,
                                                                 pre_softmax, dlogits);
  TESSERA_KERNEL_LAUNCH_CHECK();
}

void moe_expert_counts(const int32_t* chosen, int64_t slots, int64_t experts, int64_t* counts, cudaStream_t s) {
  static_assert(sizeof(unsigned long long) == sizeof(int64_t));
  TESSERA_CUDA_CHECK(cudaMemsetAsync(counts, 0, static_cast<size_t>(experts) * sizeof(int64_t), s));
  if (slots == 0) return;
  counts_kernel<<<std::min<unsigned>(blocks_for(slots), 1024), kThreads, 0, s>>>(
      chosen, slots, reinterpret_cast<unsigned long long*>(counts));
  TESSERA_KERNEL_LAUNCH_CHECK();
}

void moe_permute_forward(DType t, const void* x, const int64_t* row_slot, int64_t rows, int64_t h, int64_t topk,
                         void* out, cudaStream_t s) {
  if (rows == 0 || h == 0) return;
  TESSERA_DEVICE_FLOAT_SWITCH(t, T, permute_forward_kernel<T><<<static_cast<unsigned>(rows), kThreads, 0, s>>>(
      static_cast<const T*>(x), row_slot, h, topk, static_cast<T*>(out)));
  TESSERA_KERNEL_LAUNCH_CHECK();
}

void moe_permute_backward(DType t, const void* dout, const int64_t* slot_row, int64_t tokens, int64_t h, int64_t topk,
                          void* dx, cudaStream_t s) {
  if (tokens == 0 || h == 0) return;
  TESSERA_CHECK(topk <= kMaxTopk, "moe_permute_backward: CUDA top-k takes at most ", kMaxTopk);
  TESSERA_DEVICE_FLOAT_SWITCH(t, T, permute_backward_kernel<T><<<static_cast<unsigned>(tokens), kThreads, 0, s>>>(
      static_cast<const T*>(dout), slot_row, h, topk, static_cast<T*>(dx)));
  TESSERA_KERNEL_LAUNCH_CHECK();
}

void moe_unpermute_forward(DType t, const void* expert_out, const int64_t* slot_row, const float* probs, int64_t tokens,
                           int64_t h, int64_t topk, void* y, cudaStream_t s) {
  if (tokens == 0 || h == 0) return;
  TESSERA_CHECK(topk <= kMaxTopk, "moe_unpermute_forward: CUDA top-k takes at most ", kMaxTopk);
  TESSERA_DEVICE_FLOAT_SWITCH(t, T, unpermute_forward_kernel<T><<<static_cast<unsigned>(tokens), kThreads, 0, s>>>(
      static_cast<const T*>(expert_out), slot_row, probs, h, topk, static_cast<T*>(y)));
  TESSERA_KERNEL_LAUNCH_CHECK();
}

void moe_unpermute_backward(DType t, const void* dy, const void* expert_out, const int64_t* row_slot,
                            const float* probs, int64_t rows, int64_t tokens, int64_t h, int64_t topk,
                            void* dexpert_out, float* dprobs, cudaStream_t s) {
  TESSERA_CUDA_CHECK(cudaMemsetAsync(dprobs, 0, static_cast<size_t>(tokens * topk) * sizeof(float), s));
  if (rows == 0 || h == 0) return;
  TESSERA_DEVICE_FLOAT_SWITCH(t, T, unpermute_backward_kernel<T><<<static_cast<unsigned>(rows), kThreads, 0, s>>>(
      static_cast<const T*>(dy), static_cast<const T*>(expert_out), row_slot, probs, h, topk,
      static_cast<T*>(dexpert_out), dprobs));
  TESSERA_KERNEL_LAUNCH_CHECK();
}

}  // namespace tessera::kernels
