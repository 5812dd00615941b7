#include "tessera/ops/cuda/t5_ops_cuda.h"

#include "kernels/t5_kernels.h"
#include "tessera/core/cuda_check.h"
#include "tessera/ops/cuda/cuda_context.h"
#include "tessera/ops/cuda/cuda_op_checks.h"
#include "tessera/ops/cuda/dropout_args.h"
#include "tessera/ops/cuda/gemm_cuda.h"
#include "tessera/ops/op_checks.h"
#include "tessera/ops/swiglu.h"

namespace tessera::ops::cuda {

namespace {
cudaStream_t stream() { return CudaContext::get().stream(); }
const void* at(const Tensor& t, int64_t elements) {
  return static_cast<const char*>(t.data()) + elements * static_cast<int64_t>(dtype_size(t.dtype()));
}
void* at_mut(const Tensor& t, int64_t elements) {
  return static_cast<char*>(t.data()) + elements * static_cast<int64_t>(dtype_size(t.dtype()));
}
}  // namespace

void relu_forward(const Tensor& in, const Tensor& out) {
  const char* op = "relu_forward";
  detail::require_same_shape(op, in, "in", out, "out");
  detail::require_same_dtype(op, in, "in", out, "out");
  require_storage_dtype(op, in, "in");
  kernels::relu_forward(in.dtype(), in.data(), in.numel(), out.data(), stream());
}

void relu_backward(const Tensor& dout, const Tensor& in, const Tensor& din) {
  const char* op = "relu_backward";
  detail::require_same_shape(op, in, "in", dout, "dout");
  detail::require_same_shape(op, in, "in", din, "din");
  detail::require_same_dtypes(op, in, "in", {{&dout, "dout"}, {&din, "din"}});
  require_storage_dtype(op, in, "in");
  kernels::relu_backward(in.dtype(), dout.data(), in.data(), in.numel(), din.data(), stream());
}

void geglu_forward(const Tensor& in, const Tensor& out) {
  const char* op = "geglu_forward";
  const auto [n, f] = detail::check_swiglu_shapes(op, in, out, "out");
  require_storage_dtype(op, in, "in");
  kernels::geglu_forward(in.dtype(), in.data(), n * f, out.data(), stream());
}

void geglu_backward(const Tensor& dout, const Tensor& in, const Tensor& din) {
  const char* op = "geglu_backward";
  const auto [n, f] = detail::check_swiglu_shapes(op, in, dout, "dout");
  detail::require_same_shape(op, in, "in", din, "din");
  detail::require_same_dtype(op, in, "in", din, "din");
  require_storage_dtype(op, in, "in");
  kernels::geglu_backward(in.dtype(), dout.data(), in.data(), n * f, din.data(), stream());
}

void relative_position_bias_forward(const Tensor& weight, const Tensor& buckets, const Tensor& out) {
  const char* op = "relative_position_bias_forward";
  detail::require_same_dtype(op, weight, "weight", out, "out");
  require_storage_dtype(op, weight, "weight");
  kernels::relative_bias_forward(weight.dtype(), weight.data(), static_cast<const int32_t*>(buckets.data()),
                                 weight.dim(1), buckets.numel(), out.data(), stream());
}

void relative_position_bias_backward(const Tensor& dbias, const Tensor& buckets, const Tensor& dweight) {
  const char* op = "relative_position_bias_backward";
  detail::require_dtype(op, dweight, DType::f32, "dweight");
  require_storage_dtype(op, dbias, "dbias");
  kernels::relative_bias_backward(dbias.dtype(), dbias.data(), static_cast<const int32_t*>(buckets.data()),
                                  dweight.dim(1), buckets.numel(), static_cast<float*>(dweight.data()), stream());
}

void biased_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias,
                              const Tensor& key_padding_mask, const BiasedAttentionParams& p,
                              const RandomStream& dropout_stream, const Tensor& out, const Tensor& probs) {
  const char* op = "biased_attention_forward";
  require_storage_dtype(op, q, "q");
  detail::require_same_dtypes(op, q, "q", {{&out, "out"}, {&probs, "probs"}});
  if (bias.data()) detail::require_same_dtype(op, q, "q", bias, "bias");
  const DType dt = q.dtype();
  const int64_t b = p.batch, nh = p.num_heads, hn = p.head_dim, w = nh * hn;
  const int64_t sq = q.dim(0) / b, sk = k.dim(0) / b, block = sq * sk;
  for (int64_t h = 0; h < nh; ++h) {  // scores[bi, h] = q_h k_h^T, batched over bi
    GemmDesc g;
    g.trans_b = true;
    g.m = sq, g.n = sk, g.k = hn;
    g.lda = b * w, g.ldb = b * w, g.ldc = sk;
    g.batch = b, g.stride_a = w, g.stride_b = w, g.stride_c = nh * block;
    g.ab_dtype = g.c_dtype = dt;
    gemm(g, 1.0f, at(q, h * hn), at(k, h * hn), 0.0f, at_mut(probs, h * block));
  }
  kernels::biased_softmax_forward(dt, probs.data(), bias.data(),
                                  static_cast<const uint8_t*>(key_padding_mask.data()), b, nh, sq, sk, p.causal,
                                  stream());
  const kernels::DropoutArgs d = dropout_args(dropout_stream, p.dropout, 0);
  const int64_t heads = p.dropout_heads > 0 ? p.dropout_heads : nh;
  void* dropped = p.dropout > 0
                      ? CudaContext::get().scratch(ScratchSlot::attention_weights, b * block * dtype_size(dt))
                      : nullptr;
  for (int64_t h = 0; h < nh; ++h) {  // out_h = weights v_h
    GemmDesc g;
    g.m = sq, g.n = hn, g.k = sk;
    g.ldb = b * w, g.ldc = b * w;
    g.batch = b, g.stride_b = w, g.stride_c = w;
    g.ab_dtype = g.c_dtype = dt;
    const void* weights;
    if (dropped) {
      kernels::biased_probs_dropout(dt, probs.data(), b, nh, h, sq, sk, heads, p.dropout_first_head, d, dropped,
                                    stream());
      weights = dropped, g.lda = sk, g.stride_a = block;
    } else {
      weights = at(probs, h * block), g.lda = sk, g.stride_a = nh * block;
    }
    gemm(g, 1.0f, weights, at(v, h * hn), 0.0f, at_mut(out, h * hn));
  }
}

void biased_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& probs, const BiasedAttentionParams& p,
                               const RandomStream& dropout_stream, const Tensor& dq, const Tensor& dk,
                               const Tensor& dv, const Tensor& dbias) {
  const char* op = "biased_attention_backward";
  require_storage_dtype(op, q, "q");
  detail::require_same_dtypes(op, q, "q", {{&dout, "dout"}, {&probs, "probs"}, {&dq, "dq"}, {&dk, "dk"}, {&dv, "dv"}});
  if (dbias.data()) require_storage_dtype(op, dbias, "dbias");
  const DType dt = q.dtype();
  const int64_t b = p.batch, nh = p.num_heads, hn = p.head_dim, w = nh * hn;
  const int64_t sq = q.dim(0) / b, sk = k.dim(0) / b, block = sq * sk;
  const kernels::DropoutArgs d = dropout_args(dropout_stream, p.dropout, 0);
  const int64_t heads = p.dropout_heads > 0 ? p.dropout_heads : nh;
  CudaContext& context = CudaContext::get();
  void* dropped = p.dropout > 0 ? context.scratch(ScratchSlot::attention_weights, b * block * dtype_size(dt)) : nullptr;
  void* dscores = context.scratch(ScratchSlot::attention_dscores, b * block * dtype_size(dt));
  for (int64_t h = 0; h < nh; ++h) {
    const void* weights = at(probs, h * block);
    int64_t weights_stride = nh * block;
    if (dropped) {
      kernels::biased_probs_dropout(dt, probs.data(), b, nh, h, sq, sk, heads, p.dropout_first_head, d, dropped,
                                    stream());
      weights = dropped, weights_stride = block;
    }
    GemmDesc gv;  // dv_h = weights^T dout_h
    gv.trans_a = true;
    gv.m = sk, gv.n = hn, gv.k = sq;
    gv.lda = sk, gv.ldb = b * w, gv.ldc = b * w;
    gv.batch = b, gv.stride_a = weights_stride, gv.stride_b = w, gv.stride_c = w;
    gv.ab_dtype = gv.c_dtype = dt;
    gemm(gv, 1.0f, weights, at(dout, h * hn), 0.0f, at_mut(dv, h * hn));
    GemmDesc gd;  // dweights = dout_h v_h^T
    gd.trans_b = true;
    gd.m = sq, gd.n = sk, gd.k = hn;
    gd.lda = b * w, gd.ldb = b * w, gd.ldc = sk;
    gd.batch = b, gd.stride_a = w, gd.stride_b = w, gd.stride_c = block;
    gd.ab_dtype = gd.c_dtype = dt;
    gemm(gd, 1.0f, at(dout, h * hn), at(v, h * hn), 0.0f, dscores);
    kernels::biased_softmax_backward(dt, dscores, probs.data(), b, nh, h, sq, sk, heads, p.dropout_first_head, d,
                                     stream());
    if (dbias.data())
      kernels::batch_sum_accumulate(dt, dscores, b, block, dbias.dtype(), at_mut(dbias, h * block), stream());
    GemmDesc gq;  // dq_h = dscores k_h
    gq.m = sq, gq.n = hn, gq.k = sk;
    gq.lda = sk, gq.ldb = b * w, gq.ldc = b * w;
    gq.batch = b, gq.stride_a = block, gq.stride_b = w, gq.stride_c = w;
    gq.ab_dtype = gq.c_dtype = dt;
    gemm(gq, 1.0f, dscores, at(k, h * hn), 0.0f, at_mut(dq, h * hn));
    GemmDesc gk;  // dk_h = dscores^T q_h
    gk.trans_a = true;
    gk.m = sk, gk.n = hn, gk.k = sq;
    gk.lda = sk, gk.ldb = b * w, gk.ldc = b * w;
    gk.batch = b, gk.stride_a = block, gk.stride_b = w, gk.stride_c = w;
    gk.ab_dtype = gk.c_dtype = dt;
    gemm(gk, 1.0f, dscores, at(q, h * hn), 0.0f, at_mut(dk, h * hn));
  }
}

}  // namespace tessera::ops::cuda
