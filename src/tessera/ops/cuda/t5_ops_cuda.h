// The CUDA side of T5's ops (ReLU, GeGLU, the relative position bias, biased attention): the
// dispatchers in ops/activation.cpp, ops/swiglu.cpp, ops/relative_position_bias.cpp and
// ops/biased_attention.cpp call these for CUDA tensors. Biased attention composes cuBLASLt
// strided-batched GEMMs (per head, batched over the samples) with the kernels of kernels/t5.cu.
#pragma once
#include "tessera/core/rng.h"
#include "tessera/core/tensor.h"
#include "tessera/ops/biased_attention.h"

namespace tessera::ops::cuda {

void relu_forward(const Tensor& in, const Tensor& out);
void relu_backward(const Tensor& dout, const Tensor& in, const Tensor& din);
void geglu_forward(const Tensor& in, const Tensor& out);
void geglu_backward(const Tensor& dout, const Tensor& in, const Tensor& din);
void relative_position_bias_forward(const Tensor& weight, const Tensor& buckets, const Tensor& out);
void relative_position_bias_backward(const Tensor& dbias, const Tensor& buckets, const Tensor& dweight);
void biased_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias,
                              const Tensor& key_padding_mask, const BiasedAttentionParams& params,
                              const RandomStream& dropout_stream, const Tensor& out, const Tensor& probs);
void biased_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& probs, const BiasedAttentionParams& params,
                               const RandomStream& dropout_stream, const Tensor& dq, const Tensor& dk,
                               const Tensor& dv, const Tensor& dbias);

}  // namespace tessera::ops::cuda
