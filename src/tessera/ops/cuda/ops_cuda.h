// The CUDA implementations behind the ops dispatchers (ops/*.cpp route CUDA tensors here). Same
// signatures and semantics as the public ops; storage f32, bf16 or f16 with fp32 math. Where Megatron
// keeps fp32 state next to half activations the CUDA ops also take f32 there: dweight/dbias/dtable
// (main grad), LayerNorm mean/rstd, cross-entropy losses. All work is queued on CudaContext's stream
// without host synchronisation, except sum_of_squares, which returns a host double.
#pragma once
#include <cstdint>

#include "tessera/core/rng.h"
#include "tessera/core/tensor.h"
#include "tessera/ops/activation.h"
#include "tessera/ops/adamw.h"
#include "tessera/ops/attention.h"
#include "tessera/ops/decode_linear.h"
#include "tessera/ops/deferred_sum.h"

namespace tessera::ops::cuda {

void gelu_forward(const Tensor& in, const Tensor& out);
void gelu_backward(const Tensor& dout, const Tensor& in, const Tensor& din);
void activation_forward(Activation kind, const Tensor& in, const Tensor& out);  // exact GeLU, tanh
void activation_backward(Activation kind, const Tensor& dout, const Tensor& in, const Tensor& din);
// Megatron's fused bias + GeLU: out = gelu(in + bias[cols]) for in [..., cols].
void bias_gelu_forward(const Tensor& in, const Tensor& bias, const Tensor& out);
// SwiGLU on interleaved (gate, up) pairs (ops/swiglu.h).
void swiglu_forward(const Tensor& in, const Tensor& out);
void swiglu_backward(const Tensor& dout, const Tensor& in, const Tensor& din);

void dropout_forward(const Tensor& in, double p, const RandomStream& stream, uint64_t index_offset, const Tensor& out);
void dropout_backward(const Tensor& dout, double p, const RandomStream& stream, uint64_t index_offset,
                      const Tensor& din);

void add(const Tensor& a, const Tensor& b, const Tensor& out);
void add_inplace(const Tensor& dst, const Tensor& src);
void scale_inplace(const Tensor& dst, double factor);
void fill(const Tensor& dst, double value);
void copy(const Tensor& src, const Tensor& dst);  // also host <-> device for equal dtypes
double sum_of_squares(const Tensor& t);           // synchronises the stream
DeferredSum masked_sum_deferred(const Tensor& values, const Tensor& mask);  // no host wait
// Adds sum(t^2) to *device_total (a device double) without synchronising.
void sum_of_squares_accumulate(const Tensor& t, double* device_total);

void embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out);
void embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable);

// ops/decode_linear.h: whether the fused kernel takes the tensors, and its launch (checked shapes).
bool decode_linear_fuses(const Tensor& in, const DecodeLinear& d, const Tensor& out);
void decode_linear_forward(const Tensor& in, const DecodeLinear& d, const Tensor& out);

void layernorm_forward(const Tensor& in, const Tensor& weight, const Tensor& bias, double eps, const Tensor& out,
                       const Tensor& mean, const Tensor& rstd);
void layernorm_backward(const Tensor& dout, const Tensor& in, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd, const Tensor& din, const Tensor& dweight, const Tensor& dbias,
                        const Tensor& residual_grad);

void linear_forward(const Tensor& in, const Tensor& weight, const Tensor& bias, const Tensor& out);
void linear_residual_forward(const Tensor& in, const Tensor& weight, const Tensor& bias, const Tensor& residual,
                             const Tensor& out);
void linear_gelu_forward(const Tensor& in, const Tensor& weight, const Tensor& bias, const Tensor& pre_activation,
                         const Tensor& out);
void linear_backward_dgelu(const Tensor& dout, const Tensor& in, const Tensor& weight, const Tensor& pre_activation,
                           const Tensor& dpre, const Tensor& dweight, const Tensor& dbias);
void linear_backward(const Tensor& dout, const Tensor& in, const Tensor& weight, const Tensor& din,
                     const Tensor& dweight, const Tensor& dbias);
void matmul_nt(const Tensor& a, const Tensor& b, const Tensor& out, bool accumulate);

void attention_forward(const Tensor& qkv, const Tensor& key_padding_mask, const AttentionParams& params,
                       const RandomStream& dropout_stream, const Tensor& out, const Tensor& probs);
void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& probs, const AttentionParams& params,
                        const RandomStream& dropout_stream, const Tensor& dqkv);

void cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t valid_vocab, const Tensor& losses,
                           const Tensor& log_sum_exp);
void cross_entropy_forward_backward(const Tensor& logits, const Tensor& targets, const Tensor& dlosses,
                                    int64_t valid_vocab, const Tensor& losses, const Tensor& log_sum_exp,
                                    const Tensor& dlogits);
void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& log_sum_exp,
                            const Tensor& dlosses, int64_t valid_vocab, const Tensor& dlogits);

void adamw_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                  const AdamWParams& params);

// Waits for every op queued so far (tests and timing; the training path does not call it per op).
void synchronize();

}  // namespace tessera::ops::cuda
