// CUDA kernels of T5's ops (kernels/t5.cu): ReLU, GeGLU on interleaved (gate, up) pairs, the
// relative position bias gather / scatter-add, and the pieces of biased attention around its GEMMs
// (ops/cuda/t5_ops_cuda.cpp): the biased masked softmax, attention-probability dropout, the softmax
// backward and the bias gradient's sum over the batch. fp32 math on f32 / bf16 / f16 storage.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/kernels.h"
#include "tessera/core/dtype.h"

namespace tessera::kernels {

void relu_forward(DType t, const void* in, int64_t n, void* out, cudaStream_t s);
void relu_backward(DType t, const void* dout, const void* in, int64_t n, void* din, cudaStream_t s);
void geglu_forward(DType t, const void* in, int64_t count, void* out, cudaStream_t s);
void geglu_backward(DType t, const void* dout, const void* in, int64_t count, void* din, cudaStream_t s);

// out[h, i] = weight[buckets[i], h] over n = sq * sk entries; weight [buckets, heads].
void relative_bias_forward(DType t, const void* weight, const int32_t* buckets, int64_t heads, int64_t n, void* out,
                           cudaStream_t s);
// dweight[buckets[i], h] += dbias[h, i] (atomic; dweight f32, dbias of dtype t).
void relative_bias_backward(DType t, const void* dbias, const int32_t* buckets, int64_t heads, int64_t n,
                            float* dweight, cudaStream_t s);

// scores [b, nh, sq, sk] in place -> probs: + bias[h, i, j] (nullable, dtype t), keys removed by the
// causal mask (j > i) and pad (u8 [b, sk], nullable); a row with no key left becomes zeros.
void biased_softmax_forward(DType t, void* scores, const void* bias, const uint8_t* pad, int64_t b, int64_t nh,
                            int64_t sq, int64_t sk, bool causal, cudaStream_t s);
// dropped[bi, i, j] = dropout of probs[bi, head, i, j] (element index (bi * dropout_heads + first + head)
// * sq * sk + i * sk + j of d's stream); dropped is [b, sq, sk].
void biased_probs_dropout(DType t, const void* probs, int64_t b, int64_t nh, int64_t head, int64_t sq, int64_t sk,
                          int64_t dropout_heads, int64_t dropout_first_head, const DropoutArgs& d, void* dropped,
                          cudaStream_t s);
// dscores [b, sq, sk] (head `head`) in place: dweights -> d(scores) = p (dp - sum p dp), where dp is
// dweights through the dropout mask (as biased_probs_dropout's).
void biased_softmax_backward(DType t, void* dscores, const void* probs, int64_t b, int64_t nh, int64_t head,
                             int64_t sq, int64_t sk, int64_t dropout_heads, int64_t dropout_first_head,
                             const DropoutArgs& d, cudaStream_t s);
// dbias[i, j] += sum over bi of dscores[bi, i, j]; dscores [b, n] of dtype t, dbias n of dtype bias_t.
void batch_sum_accumulate(DType t, const void* dscores, int64_t b, int64_t n, DType bias_t, void* dbias,
                          cudaStream_t s);

}  // namespace tessera::kernels
