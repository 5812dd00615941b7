// Biased attention dispatch (checks, then the CPU reference below or the CUDA backend). The CPU
// reference runs per (batch, head) as GEMMs on strided views of the q, k and v rows.
#include "tessera/ops/biased_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tessera/ops/cpu/blas.h"
#include "tessera/ops/cpu/dropout.h"
#include "tessera/ops/cuda_dispatch.h"
#include "tessera/ops/op_checks.h"
#ifdef TESSERA_HAVE_CUDA
#include "tessera/ops/cuda/t5_ops_cuda.h"
#endif

namespace tessera::ops {

namespace {

struct Dims {
  int64_t b, nh, hn, sq, sk;
};

Dims check_dims(const char* op, const Tensor& q, const Tensor& k, const Tensor& v, const BiasedAttentionParams& p) {
  TESSERA_CHECK(p.batch >= 1 && p.num_heads >= 1 && p.head_dim >= 1, op, ": batch, num_heads and head_dim must be positive");
  TESSERA_CHECK(p.dropout >= 0.0 && p.dropout < 1.0, op, ": dropout must be in [0, 1), got ", p.dropout);
  const int64_t width = p.num_heads * p.head_dim;
  TESSERA_CHECK(q.ndim() == 2 && q.dim(1) == width && q.dim(0) % p.batch == 0, op, ": q must be [sq*b, ", width,
                "], got ", q.describe());
  TESSERA_CHECK(k.ndim() == 2 && k.dim(1) == width && k.dim(0) % p.batch == 0, op, ": k must be [sk*b, ", width,
                "], got ", k.describe());
  detail::require_same_shape(op, k, "k", v, "v");
  detail::require_same_dtypes(op, q, "q", {{&k, "k"}, {&v, "v"}});
  Dims d{p.batch, p.num_heads, p.head_dim, q.dim(0) / p.batch, k.dim(0) / p.batch};
  TESSERA_CHECK(!p.causal || d.sq <= d.sk, op, ": a causal attention needs sq <= sk, got ", d.sq, " > ", d.sk);
  return d;
}

int64_t dropout_offset(const Dims& d, const BiasedAttentionParams& p, int64_t bi, int64_t head) {
  const int64_t heads = p.dropout_heads > 0 ? p.dropout_heads : p.num_heads;
  return (bi * heads + p.dropout_first_head + head) * d.sq * d.sk;
}

template <typename T>
void forward_cpu(const T* q, const T* k, const T* v, const T* bias, const uint8_t* pad, const Dims& d,
                 const BiasedAttentionParams& p, const RandomStream& stream, T* out, T* probs) {
  const int64_t sq = d.sq, sk = d.sk, hn = d.hn, width = d.nh * d.hn, stride = d.b * width;
  std::vector<T> dropped(p.dropout > 0 ? static_cast<size_t>(sq * sk) : 0);
  const T keep_scale = static_cast<T>(1.0 / (1.0 - p.dropout));
  for (int64_t bi = 0; bi < d.b; ++bi)
    for (int64_t h = 0; h < d.nh; ++h) {
      T* pr = probs + (bi * d.nh + h) * sq * sk;
      const int64_t col = bi * width + h * hn;
      cpu::gemm<T>(false, true, sq, sk, hn, T(1), q + col, stride, k + col, stride, T(0), pr, sk);
      for (int64_t i = 0; i < sq; ++i) {
        T* row = pr + i * sk;
        if (bias) {
          const T* brow = bias + (h * sq + i) * sk;
          for (int64_t j = 0; j < sk; ++j) row[j] += brow[j];
        }
        T row_max = -std::numeric_limits<T>::infinity();
        auto allowed = [&](int64_t j) { return (!p.causal || j <= i) && (!pad || pad[bi * sk + j] != 0); };
        for (int64_t j = 0; j < sk; ++j)
          if (allowed(j)) row_max = std::max(row_max, row[j]);
        if (row_max == -std::numeric_limits<T>::infinity()) {
          std::fill(row, row + sk, T(0));
          continue;
        }
        T sum = 0;
        for (int64_t j = 0; j < sk; ++j) {
          row[j] = allowed(j) ? std::exp(row[j] - row_max) : T(0);
          sum += row[j];
        }
        for (int64_t j = 0; j < sk; ++j) row[j] /= sum;
      }
      const T* weights = pr;
      if (p.dropout > 0) {
        const int64_t offset = dropout_offset(d, p, bi, h);
        for (int64_t i = 0; i < sq * sk; ++i)
          dropped[static_cast<size_t>(i)] =
              pr[i] != T(0) && cpu::dropout_keeps(stream, static_cast<uint64_t>(offset + i), p.dropout)
                  ? pr[i] * keep_scale : T(0);
        weights = dropped.data();
      }
      cpu::gemm<T>(false, false, sq, hn, sk, T(1), weights, sk, v + col, stride, T(0), out + col, stride);
    }
}

template <typename T>
void backward_cpu(const T* dout, const T* q, const T* k, const T* v, const T* probs, const Dims& d,
                  const BiasedAttentionParams& p, const RandomStream& stream, T* dq, T* dk, T* dv, T* dbias) {
  const int64_t sq = d.sq, sk = d.sk, hn = d.hn, width = d.nh * d.hn, stride = d.b * width;
  std::fill(dq, dq + sq * stride, T(0));
  std::fill(dk, dk + sk * stride, T(0));
  std::fill(dv, dv + sk * stride, T(0));
  const T keep_scale = static_cast<T>(1.0 / (1.0 - p.dropout));
  std::vector<T> dropped(p.dropout > 0 ? static_cast<size_t>(sq * sk) : 0), ds(static_cast<size_t>(sq * sk));
  for (int64_t bi = 0; bi < d.b; ++bi)
    for (int64_t h = 0; h < d.nh; ++h) {
      const T* pr = probs + (bi * d.nh + h) * sq * sk;
      const int64_t col = bi * width + h * hn;
      const T* weights = pr;
      if (p.dropout > 0) {
        const int64_t offset = dropout_offset(d, p, bi, h);
        for (int64_t i = 0; i < sq * sk; ++i)
          dropped[static_cast<size_t>(i)] =
              pr[i] != T(0) && cpu::dropout_keeps(stream, static_cast<uint64_t>(offset + i), p.dropout)
                  ? pr[i] * keep_scale : T(0);
        weights = dropped.data();
      }
      // dv = weights^T dout; dweights = dout v^T
      cpu::gemm<T>(true, false, sk, hn, sq, T(1), weights, sk, dout + col, stride, T(0), dv + col, stride);
      cpu::gemm<T>(false, true, sq, sk, hn, T(1), dout + col, stride, v + col, stride, T(0), ds.data(), sk);
      for (int64_t i = 0; i < sq; ++i) {
        T* drow = ds.data() + i * sk;
        const T* prow = pr + i * sk;
        if (p.dropout > 0) {
          const T* wrow = weights + i * sk;
          for (int64_t j = 0; j < sk; ++j) drow[j] = wrow[j] != T(0) ? drow[j] * keep_scale : T(0);
        }
        T dot = 0;
        for (int64_t j = 0; j < sk; ++j) dot += prow[j] * drow[j];
        for (int64_t j = 0; j < sk; ++j) drow[j] = prow[j] * (drow[j] - dot);
        if (dbias) {
          T* brow = dbias + (h * sq + i) * sk;
          for (int64_t j = 0; j < sk; ++j) brow[j] += drow[j];
        }
      }
      // dq = ds k; dk = ds^T q
      cpu::gemm<T>(false, false, sq, hn, sk, T(1), ds.data(), sk, k + col, stride, T(0), dq + col, stride);
      cpu::gemm<T>(true, false, sk, hn, sq, T(1), ds.data(), sk, q + col, stride, T(0), dk + col, stride);
    }
}

void check_optional(const char* op, const Dims& d, const Tensor& q, const Tensor& bias, const Tensor& pad) {
  if (bias.data()) {
    expect_tensor(bias, q.dtype(), {d.nh, d.sq, d.sk}, "bias");
  }
  if (pad.data()) expect_tensor(pad, DType::u8, {d.b, d.sk}, "key_padding_mask");
  (void)op;
}

}  // namespace

void biased_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias,
                              const Tensor& key_padding_mask, const BiasedAttentionParams& params,
                              const RandomStream& dropout_stream, const Tensor& out, const Tensor& probs) {
  const char* op = "biased_attention_forward";
  const Dims d = check_dims(op, q, k, v, params);
  check_optional(op, d, q, bias, key_padding_mask);
  detail::require_same_shape(op, q, "q", out, "out");
  expect_tensor(probs, q.dtype(), {d.b, d.nh, d.sq, d.sk}, "probs");
  if (detail::runs_on_cuda(op, {&q, &k, &v, &bias, &key_padding_mask, &out, &probs}))
    return TESSERA_CUDA_OP(
        biased_attention_forward(q, k, v, bias, key_padding_mask, params, dropout_stream, out, probs));
  detail::require_same_dtype(op, q, "q", out, "out");
  detail::visit_f32_or_f64(op, q, "q", [&](auto tag) {
    using T = decltype(tag);
    forward_cpu<T>(q.data_as<T>(), k.data_as<T>(), v.data_as<T>(), bias.data() ? bias.data_as<T>() : nullptr,
                   key_padding_mask.data() ? key_padding_mask.data_as<uint8_t>() : nullptr, d, params, dropout_stream,
                   out.data_as<T>(), probs.data_as<T>());
  });
}

void biased_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& probs, const BiasedAttentionParams& params,
                               const RandomStream& dropout_stream, const Tensor& dq, const Tensor& dk,
                               const Tensor& dv, const Tensor& dbias) {
  const char* op = "biased_attention_backward";
  const Dims d = check_dims(op, q, k, v, params);
  detail::require_same_shape(op, q, "q", dout, "dout");
  detail::require_same_shape(op, q, "q", dq, "dq");
  detail::require_same_shape(op, k, "k", dk, "dk");
  detail::require_same_shape(op, k, "k", dv, "dv");
  expect_tensor(probs, q.dtype(), {d.b, d.nh, d.sq, d.sk}, "probs");
  if (dbias.data()) expect_tensor(dbias, dbias.dtype(), {d.nh, d.sq, d.sk}, "dbias");
  if (detail::runs_on_cuda(op, {&dout, &q, &k, &v, &probs, &dq, &dk, &dv, &dbias}))
    return TESSERA_CUDA_OP(
        biased_attention_backward(dout, q, k, v, probs, params, dropout_stream, dq, dk, dv, dbias));
  detail::require_same_dtypes(op, q, "q", {{&dout, "dout"}, {&dq, "dq"}, {&dk, "dk"}, {&dv, "dv"}});
  if (dbias.data()) detail::require_same_dtype(op, q, "q", dbias, "dbias");
  detail::visit_f32_or_f64(op, q, "q", [&](auto tag) {
    using T = decltype(tag);
    backward_cpu<T>(dout.data_as<T>(), q.data_as<T>(), k.data_as<T>(), v.data_as<T>(), probs.data_as<T>(), d, params,
                    dropout_stream, dq.data_as<T>(), dk.data_as<T>(), dv.data_as<T>(),
                    dbias.data() ? dbias.data_as<T>() : nullptr);
  });
}

}  // namespace tessera::ops
