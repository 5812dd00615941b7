// CUDA layer ops behind the dispatchers: linear / matmul_nt (cuBLASLt, bias epilogue, wgrad into the
// fp32 main grad with beta = 1; the forward of up to 8 bf16/f16 rows by skinny_linear.cu), LayerNorm,
// attention (per-head strided-batched GEMMs on the Megatron QKV layout + fused masked softmax), cross
// entropy and embedding (see ops_cuda.h).
#include <algorithm>
#include <cmath>

#include "kernels/kernels.h"
#include "tessera/ops/cuda/cuda_context.h"
#include "tessera/ops/cuda/dropout_args.h"
#include "tessera/ops/cuda/cuda_op_checks.h"
#include "tessera/ops/cuda/gemm_cuda.h"
#include "tessera/ops/cuda/ops_cuda.h"
#include "tessera/ops/op_checks.h"
#include "tessera/core/cuda_check.h"

namespace tessera::ops::cuda {

namespace {
cudaStream_t stream() { return CudaContext::get().stream(); }

Shape leading_shape(const Tensor& t) { return Shape(t.shape().begin(), t.shape().end() - 1); }

// The linear's forward GEMM out[rows, out_f] = in[rows, in_f] . weight[out_f, in_f]^T.
GemmDesc forward_gemm(int64_t rows, int64_t in_f, int64_t out_f, DType t) {
  GemmDesc g;
  g.trans_b = true;
  g.m = rows, g.n = out_f, g.k = in_f;
  g.lda = in_f, g.ldb = in_f, g.ldc = out_f;
  g.ab_dtype = g.c_dtype = t;
  return g;
}

// The linear's data-gradient GEMM din[rows, in_f] = dout[rows, out_f] . weight[out_f, in_f].
GemmDesc data_gradient_gemm(int64_t rows, int64_t in_f, int64_t out_f, DType t) {
  GemmDesc g;
  g.m = rows, g.n = in_f, g.k = out_f;
  g.lda = out_f, g.ldb = in_f, g.ldc = in_f;
  g.ab_dtype = g.c_dtype = t;
  return g;
}

void require_rows_like(const char* op, const Tensor& like, const Tensor& t, int64_t last, const char* name) {
  Shape expected = like.shape();
  expected.back() = last;
  if (t.shape() != expected)
    TESSERA_FAIL(op, ": ", name, " must be ", shape_string(expected), ", got ", t.describe());
}
}  // namespace

// ---- linear
namespace {
// out = in . weight^T + bias (+ residual: the GEMM's C with beta = 1, one rounding).
void linear_forward_into(const char* op, const Tensor& in, const Tensor& weight, const Tensor& bias,
                         const Tensor& residual, const Tensor& out) {
  require_storage_dtype(op, in, "in");
  TESSERA_CHECK(weight.ndim() == 2, op, ": weight must be [out_features, in_features], got ", weight.describe());
  const int64_t out_f = weight.dim(0), in_f = weight.dim(1);
  const int64_t rows = detail::rows_with_last_dim(op, in, in_f, "in");
  require_rows_like(op, in, out, out_f, "out");
  detail::require_same_dtypes(op, in, "in", {{&weight, "weight"}, {&out, "out"}});
  if (bias.defined() && bias.data()) {
    detail::require_same_dtype(op, in, "in", bias, "bias");
    TESSERA_CHECK(bias.shape() == Shape{out_f}, op, ": bias must be [", out_f, "] or undefined, got ", bias.describe());
  }
  // A few rows (decode steps): one pass over the weight beats a GEMM library's tiles.
  if (kernels::skinny_linear_applies(in.dtype(), rows, in_f, in.data(), weight.data())) {
    kernels::skinny_linear_forward(in.dtype(), in.data(), weight.data(), bias.defined() ? bias.data() : nullptr, rows,
                                   out_f, in_f, out.data(), stream());
    if (residual.defined()) add(out, residual, out);
    return;
  }
  gemm(forward_gemm(rows, in_f, out_f, in.dtype()), 1.0f, in.data(), weight.data(), residual.defined() ? 1.0f : 0.0f,
       out.data(), bias.defined() ? bias.data() : nullptr, residual.defined() ? residual.data() : nullptr);
}
}  // namespace

void linear_forward(const Tensor& in, const Tensor& weight, const Tensor& bias, const Tensor& out) {
  linear_forward_into("linear_forward", in, weight, bias, Tensor(), out);
}

void linear_residual_forward(const Tensor& in, const Tensor& weight, const Tensor& bias, const Tensor& residual,
                             const Tensor& out) {
  linear_forward_into("linear_residual_forward", in, weight, bias, residual, out);
}

void linear_backward(const Tensor& dout, const Tensor& in, const Tensor& weight, const Tensor& din,
                     const Tensor& dweight, const Tensor& dbias) {
  const char* op = "linear_backward";
  require_storage_dtype(op, in, "in");
  TESSERA_CHECK(weight.ndim() == 2, op, ": weight must be [out_features, in_features], got ", weight.describe());
  const int64_t out_f = weight.dim(0), in_f = weight.dim(1);
  const int64_t rows = detail::rows_with_last_dim(op, in, in_f, "in");
  require_rows_like(op, in, dout, out_f, "dout");
  detail::require_same_dtypes(op, in, "in", {{&weight, "weight"}, {&dout, "dout"}});
  const bool has_din = din.defined() && din.data(), has_dw = dweight.defined() && dweight.data(),
             has_db = dbias.defined() && dbias.data();
  if (has_din) {
    detail::require_same_shape(op, in, "in", din, "din");
    detail::require_same_dtype(op, in, "in", din, "din");
    gemm(data_gradient_gemm(rows, in_f, out_f, in.dtype()), 1.0f, dout.data(), weight.data(), 0.0f, din.data());
  }
  if (has_db) {
    require_like_or_f32(op, in, "in", dbias, "dbias");
    TESSERA_CHECK(dbias.shape() == Shape{out_f}, op, ": dbias must be [", out_f, "] or undefined, got ", dbias.describe());
  }
  if (has_dw) {
    detail::require_same_shape(op, weight, "weight", dweight, "dweight");
    require_like_or_f32(op, in, "in", dweight, "dweight");
    GemmDesc g;  // dweight[out, in] += dout^T . in
    g.trans_a = true;
    g.m = out_f, g.n = in_f, g.k = rows;
    g.lda = out_f, g.ldb = in_f, g.ldc = in_f;
    g.ab_dtype = in.dtype(), g.c_dtype = dweight.dtype();
    gemm(g, 1.0f, dout.data(), in.data(), 1.0f, dweight.data());
  }
  // The bias gradient by the fixed-order column-sum kernels (bitwise the same every run). cuBLASLt's
  // BGRADB epilogue ran a separate reduction kernel of its own that was slower (GPT-2 124M: 1.5-1.9%
  // of a step, docs/training-performance.md).
  if (has_db)
    kernels::column_sum_accumulate(in.dtype(), dout.data(), rows, out_f, dbias.dtype(), dbias.data(), stream(),
                                   column_sum_scratch(rows, out_f));
}

// pre_activation = in . weight^T + bias, out = gelu(pre_activation): one cuBLASLt GEMM with the
// GELU_AUX_BIAS epilogue where it offers one, else the GEMM and the GeLU kernel. The epilogue takes
// the GeLU of the fp32 sum, the kernel of the rounded pre-activation: deterministic mode keeps the
// kernel, so that selective recomputation (which recomputes the GeLU from the pre-activation) stays
// bitwise equal to none.
void linear_gelu_forward(const Tensor& in, const Tensor& weight, const Tensor& bias, const Tensor& pre_activation,
                         const Tensor& out) {
  const char* op = "linear_gelu_forward";
  detail::require_same_shape(op, pre_activation, "pre_activation", out, "out");
  detail::require_same_dtype(op, pre_activation, "pre_activation", out, "out");
  TESSERA_CHECK(weight.ndim() == 2, op, ": weight must be [out_features, in_features], got ", weight.describe());
  const int64_t out_f = weight.dim(0), in_f = weight.dim(1);
  const int64_t rows = detail::rows_with_last_dim(op, in, in_f, "in");
  const bool has_bias = bias.defined() && bias.data();
  bool fused = false;
  const bool fits = out.dtype() == in.dtype() && weight.dtype() == in.dtype() && out.shape().back() == out_f &&
                    out.numel() == rows * out_f && (!has_bias || (bias.dtype() == in.dtype() && bias.numel() == out_f));
  if (fits && !deterministic_mode() &&
      !kernels::skinny_linear_applies(in.dtype(), rows, in_f, in.data(), weight.data())) {
    fused = gemm_gelu_aux(forward_gemm(rows, in_f, out_f, in.dtype()), in.data(), weight.data(), out.data(),
                          has_bias ? bias.data() : nullptr, pre_activation.data());
  }
  if (fused) return;
  linear_forward(in, weight, bias, pre_activation);  // checks everything the fused path assumed
  gelu_forward(pre_activation, out);
}

// dpre = (dout . weight) * gelu'(pre_activation): the data-gradient GEMM with cuBLASLt's DGELU
// epilogue where it offers one (else the GEMM, then the GeLU backward in place); dweight and dbias
// accumulate as linear_backward's.
void linear_backward_dgelu(const Tensor& dout, const Tensor& in, const Tensor& weight, const Tensor& pre_activation,
                           const Tensor& dpre, const Tensor& dweight, const Tensor& dbias) {
  const char* op = "linear_backward_dgelu";
  detail::require_same_shape(op, in, "in", pre_activation, "pre_activation");
  detail::require_same_shape(op, in, "in", dpre, "dpre");
  detail::require_same_dtypes(op, in, "in", {{&pre_activation, "pre_activation"}, {&dpre, "dpre"}});
  TESSERA_CHECK(weight.ndim() == 2, op, ": weight must be [out_features, in_features], got ", weight.describe());
  const int64_t out_f = weight.dim(0), in_f = weight.dim(1);
  const int64_t rows = detail::rows_with_last_dim(op, in, in_f, "in");
  bool fused = false;
  if (dout.dtype() == in.dtype() && weight.dtype() == in.dtype() && dout.numel() == rows * out_f &&
      dout.shape().back() == out_f) {
    fused = gemm_dgelu(data_gradient_gemm(rows, in_f, out_f, in.dtype()), dout.data(), weight.data(), dpre.data(),
                       pre_activation.data());  // dpre = (dout . weight) * gelu'(pre)
  }
  if (fused) {
    linear_backward(dout, in, weight, Tensor(), dweight, dbias);
    return;
  }
  linear_backward(dout, in, weight, dpre, dweight, dbias);
  gelu_backward(dpre, pre_activation, dpre);  // elementwise: in place is safe
}

void matmul_nt(const Tensor& a, const Tensor& b, const Tensor& out, bool accumulate) {
  const char* op = "matmul_nt";
  require_storage_dtype(op, a, "a");
  TESSERA_CHECK(b.ndim() == 2, op, ": b must be [n, k], got ", b.describe());
  const int64_t n = b.dim(0), k = b.dim(1);
  const int64_t m = detail::rows_with_last_dim(op, a, k, "a");
  if (out.shape() != Shape{m, n}) require_rows_like(op, a, out, n, "out");
  detail::require_same_dtype(op, a, "a", b, "b");
  require_like_or_f32(op, a, "a", out, "out");
  GemmDesc g;
  g.trans_b = true;
  g.m = m, g.n = n, g.k = k;
  g.lda = k, g.ldb = k, g.ldc = n;
  g.ab_dtype = a.dtype(), g.c_dtype = out.dtype();
  gemm(g, 1.0f, a.data(), b.data(), accumulate ? 1.0f : 0.0f, out.data());
}

// ---- layernorm
void layernorm_forward(const Tensor& in, const Tensor& weight, const Tensor& bias, double eps, const Tensor& out,
                       const Tensor& mean, const Tensor& rstd) {
  const char* op = "layernorm_forward";
  require_storage_dtype(op, in, "in");
  TESSERA_CHECK(weight.ndim() == 1, op, ": weight must be [hidden], got ", weight.describe());
  TESSERA_CHECK(eps >= 0.0, op, ": eps must be >= 0, got ", eps);
  const int64_t hidden = weight.dim(0);
  const int64_t rows = detail::rows_with_last_dim(op, in, hidden, "in");
  detail::require_same_shape(op, weight, "weight", bias, "bias");
  detail::require_same_shape(op, in, "in", out, "out");
  detail::require_vector_like(op, mean, rows, leading_shape(in), "mean");
  detail::require_vector_like(op, rstd, rows, leading_shape(in), "rstd");
  detail::require_same_dtypes(op, in, "in", {{&weight, "weight"}, {&bias, "bias"}, {&out, "out"}});
  require_like_or_f32(op, in, "in", mean, "mean");
  detail::require_same_dtype(op, mean, "mean", rstd, "rstd");
  kernels::layernorm_forward(in.dtype(), in.data(), weight.data(), bias.data(), eps, rows, hidden, out.data(),
                             mean.dtype(), mean.data(), rstd.data(), stream());
}

void layernorm_backward(const Tensor& dout, const Tensor& in, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd, const Tensor& din, const Tensor& dweight, const Tensor& dbias,
                        const Tensor& residual_grad) {
  const char* op = "layernorm_backward";
  require_storage_dtype(op, in, "in");
  TESSERA_CHECK(weight.ndim() == 1, op, ": weight must be [hidden], got ", weight.describe());
  const int64_t hidden = weight.dim(0);
  const int64_t rows = detail::rows_with_last_dim(op, in, hidden, "in");
  detail::require_same_shape(op, in, "in", dout, "dout");
  detail::require_same_shape(op, in, "in", din, "din");
  detail::require_same_shape(op, weight, "weight", dweight, "dweight");
  detail::require_same_shape(op, weight, "weight", dbias, "dbias");
  detail::require_vector_like(op, mean, rows, leading_shape(in), "mean");
  detail::require_vector_like(op, rstd, rows, leading_shape(in), "rstd");
  detail::require_same_dtypes(op, in, "in", {{&dout, "dout"}, {&weight, "weight"}, {&din, "din"}});
  require_like_or_f32(op, in, "in", mean, "mean");
  detail::require_same_dtype(op, mean, "mean", rstd, "rstd");
  require_like_or_f32(op, in, "in", dweight, "dweight");
  detail::require_same_dtype(op, dweight, "dweight", dbias, "dbias");
  if (residual_grad.defined()) {
    detail::require_same_shape(op, in, "in", residual_grad, "residual_grad");
    detail::require_same_dtypes(op, in, "in", {{&residual_grad, "residual_grad"}});
  }
  const bool deterministic = deterministic_mode();
  auto* scratch = static_cast<float*>(CudaContext::get().scratch(
      ScratchSlot::layernorm_sums,
      sizeof(float) * std::max<int64_t>(1, kernels::layernorm_backward_scratch_floats(rows, hidden, deterministic))));
  kernels::layernorm_backward(in.dtype(), dout.data(), in.data(), weight.data(), mean.dtype(), mean.data(), rstd.data(),
                              rows, hidden, din.data(), dweight.dtype(), dweight.data(), dbias.data(),
                              residual_grad.defined() ? residual_grad.data() : nullptr, scratch, stream(),
                              deterministic);
}

// ---- attention
namespace {
struct AttentionLayout {
  int64_t s, b, na, ng, hn, hpg, width;
  // Element offsets inside one sequence row of qkv (batch element 0) for head h.
  int64_t q(int64_t h) const { return (h / hpg) * (hpg + 2) * hn + (h % hpg) * hn; }
  int64_t k(int64_t h) const { return (h / hpg) * (hpg + 2) * hn + hpg * hn; }
  int64_t v(int64_t h) const { return k(h) + hn; }
};

AttentionLayout attention_layout(const char* op, const Tensor& qkv, const AttentionParams& p) {
  TESSERA_CHECK(p.num_heads > 0 && p.num_query_groups > 0 && p.head_dim > 0, op,
                ": num_heads, num_query_groups and head_dim must be positive");
  TESSERA_CHECK(p.num_heads % p.num_query_groups == 0, op, ": num_heads (", p.num_heads,
                ") must be a multiple of num_query_groups (", p.num_query_groups, ")");
  TESSERA_CHECK(p.dropout >= 0.0 && p.dropout < 1.0, op, ": attention dropout must be in [0, 1), got ", p.dropout);
  TESSERA_CHECK(p.dropout == 0.0 || ((p.dropout_heads == 0 || p.dropout_heads == p.num_heads) && p.dropout_first_head == 0),
                op, ": attention dropout indexed over ", p.dropout_heads, " heads from head ", p.dropout_first_head,
                " (tensor-parallel attention dropout) has no CUDA kernel yet; the kernels index probs' own heads");
  require_storage_dtype(op, qkv, "qkv");
  const int64_t width = (p.num_heads + 2 * p.num_query_groups) * p.head_dim;
  if (qkv.ndim() != 3 || qkv.dim(2) != width)
    TESSERA_FAIL(op, ": qkv must be [s, b, ", width, "], got ", qkv.describe());
  return {qkv.dim(0), qkv.dim(1), p.num_heads, p.num_query_groups, p.head_dim, p.num_heads / p.num_query_groups, width};
}

kernels::DropoutArgs attention_dropout(const AttentionParams& p, const RandomStream& rng) {
  return dropout_args(rng, p.dropout, 0);
}

char* at(const Tensor& t, int64_t elements) { return static_cast<char*>(t.data()) + elements * dtype_size(t.dtype()); }
}  // namespace

void attention_forward(const Tensor& qkv, const Tensor& key_padding_mask, const AttentionParams& params,
                       const RandomStream& dropout_stream, const Tensor& out, const Tensor& probs) {
  const char* op = "attention_forward";
  const AttentionLayout L = attention_layout(op, qkv, params);
  expect_tensor(out, qkv.dtype(), {L.s, L.b, L.na * L.hn}, "attention_forward: out");
  expect_tensor(probs, qkv.dtype(), {L.b, L.na, L.s, L.s}, "attention_forward: probs");
  const bool masked = key_padding_mask.defined() && key_padding_mask.data();
  if (masked) expect_tensor(key_padding_mask, DType::u8, {L.b, L.s}, "attention_forward: key_padding_mask");
  check_document_ids(op, params, L.b, L.s, qkv.device());
  const int32_t* documents =
      params.document_ids.defined() ? static_cast<const int32_t*>(params.document_ids.data()) : nullptr;
  const DType dt = qkv.dtype();
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(L.hn)));
  const int64_t row_stride = L.b * L.width, ss = L.s * L.s;
  for (int64_t h = 0; h < L.na; ++h) {  // scores[b, h] = scale q k^T, batched over b
    GemmDesc g;
    g.trans_b = true;
    g.m = L.s, g.n = L.s, g.k = L.hn;
    g.lda = row_stride, g.ldb = row_stride, g.ldc = L.s;
    g.batch = L.b, g.stride_a = L.width, g.stride_b = L.width, g.stride_c = L.na * ss;
    g.ab_dtype = g.c_dtype = dt;
    gemm(g, scale, at(qkv, L.q(h)), at(qkv, L.k(h)), 0.0f, at(probs, h * ss));
  }
  const std::vector<double> alibi = attention_alibi_slopes(params);  // checks the head range
  kernels::attention_softmax_forward(dt, probs.data(), masked ? static_cast<const uint8_t*>(key_padding_mask.data()) : nullptr,
                                     L.b, L.na, L.s, params.causal, stream(),
                                     alibi.empty() ? 0 : (params.alibi_heads > 0 ? params.alibi_heads : params.num_heads),
                                     params.alibi_first_head, documents);
  const kernels::DropoutArgs d = attention_dropout(params, dropout_stream);
  void* dropped = d.p > 0.0 ? CudaContext::get().scratch(ScratchSlot::attention_weights, L.b * ss * dtype_size(dt)) : nullptr;
  for (int64_t h = 0; h < L.na; ++h) {  // out[:, b, h] = weights v
    GemmDesc g;
    g.m = L.s, g.n = L.hn, g.k = L.s;
    g.ldb = row_stride, g.ldc = L.b * L.na * L.hn;
    g.batch = L.b, g.stride_b = L.width, g.stride_c = L.na * L.hn;
    g.ab_dtype = g.c_dtype = dt;
    const void* weights;
    if (dropped) {
      kernels::attention_probs_dropout(dt, probs.data(), L.b, L.na, h, L.s, d, dropped, stream());
      weights = dropped, g.lda = L.s, g.stride_a = ss;
    } else {
      weights = at(probs, h * ss), g.lda = L.s, g.stride_a = L.na * ss;
    }
    gemm(g, 1.0f, weights, at(qkv, L.v(h)), 0.0f, at(out, h * L.hn));
  }
}

void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& probs, const AttentionParams& params,
                        const RandomStream& dropout_stream, const Tensor& dqkv) {
  const char* op = "attention_backward";
  const AttentionLayout L = attention_layout(op, qkv, params);
  expect_tensor(dout, qkv.dtype(), {L.s, L.b, L.na * L.hn}, "attention_backward: dout");
  expect_tensor(probs, qkv.dtype(), {L.b, L.na, L.s, L.s}, "attention_backward: probs");
  detail::require_same_shape(op, qkv, "qkv", dqkv, "dqkv");
  detail::require_same_dtype(op, qkv, "qkv", dqkv, "dqkv");
  TESSERA_CHECK(dqkv.data() != qkv.data() || qkv.numel() == 0, op, ": dqkv must not alias qkv");
  const DType dt = qkv.dtype();
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(L.hn)));
  const int64_t row_stride = L.b * L.width, ss = L.s * L.s, out_stride = L.b * L.na * L.hn;
  TESSERA_CUDA_CHECK(cudaMemsetAsync(dqkv.data(), 0, dqkv.nbytes(), stream()));
  const kernels::DropoutArgs d = attention_dropout(params, dropout_stream);
  CudaContext& context = CudaContext::get();
  void* dropped = d.p > 0.0 ? context.scratch(ScratchSlot::attention_weights, L.b * ss * dtype_size(dt)) : nullptr;
  void* dscores = context.scratch(ScratchSlot::attention_dscores, L.b * ss * dtype_size(dt));
  for (int64_t h = 0; h < L.na; ++h) {
    const void* weights = at(probs, h * ss);
    int64_t weights_stride = L.na * ss;
    if (dropped) {
      kernels::attention_probs_dropout(dt, probs.data(), L.b, L.na, h, L.s, d, dropped, stream());
      weights = dropped, weights_stride = ss;
    }
    GemmDesc g;  // dv += weights^T dout
    g.trans_a = true;
    g.m = L.s, g.n = L.hn, g.k = L.s;
    g.lda = L.s, g.ldb = out_stride, g.ldc = row_stride;
    g.batch = L.b, g.stride_a = weights_stride, g.stride_b = L.na * L.hn, g.stride_c = L.width;
    g.ab_dtype = g.c_dtype = dt;
    gemm(g, 1.0f, weights, at(dout, h * L.hn), 1.0f, at(dqkv, L.v(h)));
    GemmDesc gd;  // dweights = dout v^T
    gd.trans_b = true;
    gd.m = L.s, gd.n = L.s, gd.k = L.hn;
    gd.lda = out_stride, gd.ldb = row_stride, gd.ldc = L.s;
    gd.batch = L.b, gd.stride_a = L.na * L.hn, gd.stride_b = L.width, gd.stride_c = ss;
    gd.ab_dtype = gd.c_dtype = dt;
    gemm(gd, 1.0f, at(dout, h * L.hn), at(qkv, L.v(h)), 0.0f, dscores);
    kernels::attention_softmax_backward(dt, dscores, probs.data(), L.b, L.na, h, L.s, scale, d, stream());
    GemmDesc gq;  // dq = dscores k
    gq.m = L.s, gq.n = L.hn, gq.k = L.s;
    gq.lda = L.s, gq.ldb = row_stride, gq.ldc = row_stride;
    gq.batch = L.b, gq.stride_a = ss, gq.stride_b = L.width, gq.stride_c = L.width;
    gq.ab_dtype = gq.c_dtype = dt;
    gemm(gq, 1.0f, dscores, at(qkv, L.k(h)), 1.0f, at(dqkv, L.q(h)));
    GemmDesc gk = gq;  // dk += dscores^T q
    gk.trans_a = true;
    gemm(gk, 1.0f, dscores, at(qkv, L.q(h)), 1.0f, at(dqkv, L.k(h)));
  }
}

// ---- cross entropy
namespace {
int64_t check_logits(const char* op, const Tensor& logits, const Tensor& targets, int64_t valid_vocab) {
  require_storage_dtype(op, logits, "logits");
  TESSERA_CHECK(logits.ndim() >= 1, op, ": logits must be [n, V], got ", logits.describe());
  const int64_t vocab = logits.dim(-1);
  TESSERA_CHECK(valid_vocab >= 1 && valid_vocab <= vocab, op, ": valid_vocab must be in [1, ", vocab, "], got ",
                valid_vocab);
  const int64_t n = vocab ? logits.numel() / vocab : 0;
  detail::require_dtype(op, targets, DType::i32, "targets");
  detail::require_vector_like(op, targets, n, leading_shape(logits), "targets");
  return n;
}
}  // namespace

void cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t valid_vocab, const Tensor& losses,
                           const Tensor& log_sum_exp) {
  const char* op = "cross_entropy_forward";
  const int64_t n = check_logits(op, logits, targets, valid_vocab);
  detail::require_vector_like(op, losses, n, leading_shape(logits), "losses");
  detail::require_vector_like(op, log_sum_exp, n, leading_shape(logits), "log_sum_exp");
  require_like_or_f32(op, logits, "logits", losses, "losses");
  detail::require_same_dtype(op, losses, "losses", log_sum_exp, "log_sum_exp");
  kernels::cross_entropy_forward(logits.dtype(), logits.data(), static_cast<const int32_t*>(targets.data()), n,
                                 logits.dim(-1), valid_vocab, losses.dtype(), losses.data(), log_sum_exp.data(), stream());
}

void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& log_sum_exp,
                            const Tensor& dlosses, int64_t valid_vocab, const Tensor& dlogits) {
  const char* op = "cross_entropy_backward";
  const int64_t n = check_logits(op, logits, targets, valid_vocab);
  detail::require_vector_like(op, log_sum_exp, n, leading_shape(logits), "log_sum_exp");
  detail::require_vector_like(op, dlosses, n, leading_shape(logits), "dlosses");
  detail::require_same_shape(op, logits, "logits", dlogits, "dlogits");
  detail::require_same_dtype(op, logits, "logits", dlogits, "dlogits");
  require_like_or_f32(op, logits, "logits", log_sum_exp, "log_sum_exp");
  detail::require_same_dtype(op, log_sum_exp, "log_sum_exp", dlosses, "dlosses");
  kernels::cross_entropy_backward(logits.dtype(), logits.data(), static_cast<const int32_t*>(targets.data()),
                                  log_sum_exp.dtype(), log_sum_exp.data(), dlosses.data(), n, logits.dim(-1),
                                  valid_vocab, dlogits.data(), stream());
}

void cross_entropy_forward_backward(const Tensor& logits, const Tensor& targets, const Tensor& dlosses,
                                    int64_t valid_vocab, const Tensor& losses, const Tensor& log_sum_exp,
                                    const Tensor& dlogits) {
  const char* op = "cross_entropy_forward_backward";
  if (!kernels::cross_entropy_fused_supported(logits.dtype(), logits.data(), dlogits.data(), logits.dim(-1))) {
    cross_entropy_forward(logits, targets, valid_vocab, losses, log_sum_exp);
    cross_entropy_backward(logits, targets, log_sum_exp, dlosses, valid_vocab, dlogits);
    return;
  }
  const int64_t n = check_logits(op, logits, targets, valid_vocab);
  detail::require_vector_like(op, losses, n, leading_shape(logits), "losses");
  detail::require_vector_like(op, log_sum_exp, n, leading_shape(logits), "log_sum_exp");
  detail::require_vector_like(op, dlosses, n, leading_shape(logits), "dlosses");
  detail::require_same_shape(op, logits, "logits", dlogits, "dlogits");
  detail::require_same_dtype(op, logits, "logits", dlogits, "dlogits");
  require_like_or_f32(op, logits, "logits", losses, "losses");
  detail::require_same_dtype(op, losses, "losses", log_sum_exp, "log_sum_exp");
  detail::require_same_dtype(op, losses, "losses", dlosses, "dlosses");
  kernels::cross_entropy_fused(logits.dtype(), logits.data(), static_cast<const int32_t*>(targets.data()),
                               losses.dtype(), dlosses.data(), n, logits.dim(-1), valid_vocab, losses.data(),
                               log_sum_exp.data(), dlogits.data(), stream());
}

// ---- embedding
namespace {
void check_rows(const char* op, const Tensor& ids, const Tensor& rows, int64_t hidden, const char* name) {
  Shape nested = ids.shape();
  nested.push_back(hidden);
  if (rows.shape() != nested && rows.shape() != Shape{ids.numel(), hidden})
    TESSERA_FAIL(op, ": ", name, " must be [", ids.numel(), ", ", hidden, "] or ", shape_string(nested), ", got ",
                 rows.describe());
}
}  // namespace

void embedding_forward(const Tensor& ids, const Tensor& table, const Tensor& out) {
  const char* op = "embedding_forward";
  detail::require_dtype(op, ids, DType::i32, "ids");
  TESSERA_CHECK(table.ndim() == 2, op, ": table must be [vocab, hidden], got ", table.describe());
  require_storage_dtype(op, table, "table");
  detail::require_same_dtype(op, table, "table", out, "out");
  check_rows(op, ids, out, table.dim(1), "out");
  kernels::embedding_forward(table.dtype(), static_cast<const int32_t*>(ids.data()), ids.numel(), table.data(),
                             table.dim(0), table.dim(1), out.data(), stream());
}

void embedding_backward(const Tensor& ids, const Tensor& dout, const Tensor& dtable) {
  const char* op = "embedding_backward";
  detail::require_dtype(op, ids, DType::i32, "ids");
  TESSERA_CHECK(dtable.ndim() == 2, op, ": dtable must be [vocab, hidden], got ", dtable.describe());
  require_storage_dtype(op, dout, "dout");
  require_like_or_f32(op, dout, "dout", dtable, "dtable");
  check_rows(op, ids, dout, dtable.dim(1), "dout");
  void* det_scratch = deterministic_mode() ? CudaContext::get().scratch(
                                                 ScratchSlot::embedding_sort,
                                                 kernels::embedding_backward_scratch_bytes(ids.numel()))
                                           : nullptr;
  kernels::embedding_backward(dout.dtype(), static_cast<const int32_t*>(ids.data()), ids.numel(), dout.data(),
                              dtable.dim(0), dtable.dim(1), dtable.dtype(), dtable.data(), stream(), det_scratch);
}

}  // namespace tessera::ops::cuda
