// Fused attention dispatch: argument checks, CUDA tensors to ops/cuda/flash_attention_cuda.cpp, CPU
// tensors (f32/f64; bf16/f16 through f32) to a reference built on cpu/attention.h plus the row lse.
#include "tessera/ops/flash_attention.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "tessera/ops/cpu/attention.h"
#include "tessera/ops/cpu/blas.h"
#include "tessera/ops/half_compute.h"
#include "tessera/ops/op_checks.h"

namespace tessera::ops {

namespace {

[[maybe_unused]] bool aligned16(const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data()) % 16 == 0; }

// Validates params, qkv [s, b, (na + 2 ng) hn] and the device-specific dtype rules; returns the dims.
cpu::AttentionDims flash_dims(const char* op, const Tensor& qkv, const AttentionParams& params,
                              const RandomStream* dropout_stream) {
  detail::require_defined(op, qkv, "qkv");
  TESSERA_CHECK(params.num_heads > 0 && params.num_query_groups > 0 && params.head_dim > 0, op,
                ": num_heads, num_query_groups and head_dim must be positive, got ", params.num_heads, ", ",
                params.num_query_groups, ", ", params.head_dim);
  TESSERA_CHECK(params.num_heads % params.num_query_groups == 0, op, ": num_heads (", params.num_heads,
                ") must be a multiple of num_query_groups (", params.num_query_groups, ")");
  TESSERA_CHECK(params.dropout >= 0.0 && params.dropout < 1.0, op, ": attention dropout must be in [0, 1), got ",
                params.dropout);
  TESSERA_CHECK(params.dropout == 0.0 || qkv.device().is_cuda(), op,
                ": the CPU's fused attention has no attention dropout, got dropout ", params.dropout,
                " (ops::attention_forward/backward is the CPU reference with dropout)");
  TESSERA_CHECK(params.dropout == 0.0 || dropout_stream != nullptr, op, ": attention dropout ", params.dropout,
                " needs the dropout stream");
  const int64_t width = (params.num_heads + 2 * params.num_query_groups) * params.head_dim;
  if (qkv.ndim() != 3 || qkv.dim(2) != width)
    TESSERA_FAIL(op, ": qkv must be [s, b, (num_heads + 2 num_query_groups) head_dim] = [s, b, ", width, "], got ",
                 qkv.describe());
  if (qkv.device().is_cuda()) {
    if (qkv.dtype() != DType::bf16 && qkv.dtype() != DType::f16)
      TESSERA_FAIL(op, ": qkv must be bf16 or f16 on CUDA (f32 has no fused kernel; use ops::attention_*), got ",
                   qkv.describe());
    TESSERA_CHECK(params.head_dim == 64 || params.head_dim == 128, op, ": head_dim must be 64 or 128 on CUDA, got ",
                  params.head_dim);
    TESSERA_CHECK(qkv.dim(0) < (int64_t(1) << 31) && qkv.dim(1) < 65536 && params.num_heads < 65536, op,
                  ": s must be < 2^31, b and num_heads < 65536 on CUDA, got qkv ", qkv.describe(), " with ",
                  params.num_heads, " heads");
  }
  cpu::AttentionDims d;
  d.alibi_slopes = attention_alibi_slopes(params);
  d.seq = qkv.dim(0);
  d.batch = qkv.dim(1);
  d.num_heads = params.num_heads;
  d.num_query_groups = params.num_query_groups;
  d.head_dim = params.head_dim;
  return d;
}

void check_lse(const char* op, const Tensor& qkv, const cpu::AttentionDims& d, const Tensor& lse) {
  const Shape shape{d.batch, d.num_heads, d.seq};
  if (qkv.device().is_cuda() || detail::is_half(qkv.dtype()) || lse.dtype() == DType::f32)
    expect_tensor(lse, DType::f32, shape, (std::string(op) + ": lse (f32 [b, na, s])").c_str());
  else
    expect_tensor(lse, qkv.dtype(), shape, (std::string(op) + ": lse (f32 or qkv's dtype, [b, na, s])").c_str());
}

void check_mask(const char* op, const Tensor& key_padding_mask, const cpu::AttentionDims& d) {
  if (key_padding_mask.defined() && key_padding_mask.data())
    expect_tensor(key_padding_mask, DType::u8, {d.batch, d.seq},
                  (std::string(op) + ": key_padding_mask (u8 [b, s], 1 = attend)").c_str());
}

void check_dropout_record(const char* op, const Tensor& qkv, const AttentionParams& params, const Tensor& record) {
  if (!record.defined()) return;
  const int64_t words = flash_attention_dropout_record_words(qkv, params);
  TESSERA_CHECK(words > 0, op, ": a dropout_record where the kernels keep none (qkv ", qkv.describe(), ", dropout ",
                params.dropout, ", head_dim ", params.head_dim, "); pass an undefined tensor");
  expect_tensor(record, DType::i32, {words},
                (std::string(op) + ": dropout_record (i32 [flash_attention_dropout_record_words])").c_str());
}

const uint8_t* mask_data(const Tensor& key_padding_mask) {
  return key_padding_mask.defined() ? static_cast<const uint8_t*>(key_padding_mask.data()) : nullptr;
}

const int32_t* document_data(const AttentionParams& params) {
  return params.document_ids.defined() ? static_cast<const int32_t*>(params.document_ids.data()) : nullptr;
}

// Offsets of head `head` of batch element bi inside qkv (see ops/attention.h), row stride b * width.
struct HeadOffsets {
  int64_t q, k, row_stride;
};
HeadOffsets head_offsets(const cpu::AttentionDims& d, int64_t bi, int64_t head) {
  const int64_t hpg = d.num_heads / d.num_query_groups, width = (d.num_heads + 2 * d.num_query_groups) * d.head_dim;
  const int64_t group_base = bi * width + (head / hpg) * (hpg + 2) * d.head_dim;
  return {group_base + (head % hpg) * d.head_dim, group_base + hpg * d.head_dim, d.batch * width};
}

// Reference forward: the unfused attention (dropout 0) for out and probs, then per row
// lse = score(i, j*) - log p(i, j*) at the most probable key j* (p(i, j*) = 1 / sum after the max shift).
template <typename T, typename L>
void cpu_flash_forward(const T* qkv, const uint8_t* mask, const int32_t* documents, const cpu::AttentionDims& d,
                       bool causal, T* out, L* lse) {
  const int64_t s = d.seq, hn = d.head_dim;
  std::vector<T> probs(static_cast<size_t>(d.batch * d.num_heads * s * s));
  cpu::attention_forward<T>(qkv, mask, documents, d, causal, 0.0, RandomStream(0, 0), out, probs.data());
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(hn)));
  for (int64_t bi = 0; bi < d.batch; ++bi)
    for (int64_t head = 0; head < d.num_heads; ++head) {
      const HeadOffsets o = head_offsets(d, bi, head);
      const T* p = probs.data() + (bi * d.num_heads + head) * s * s;
      for (int64_t i = 0; i < s; ++i) {
        const T* row = p + i * s;
        int64_t best = 0;
        for (int64_t j = 1; j < s; ++j)
          if (row[j] > row[best]) best = j;
        L& result = lse[(bi * d.num_heads + head) * s + i];
        if (row[best] == T(0)) {  // no key left
          result = -std::numeric_limits<L>::infinity();
          continue;
        }
        const T* q = qkv + o.q + i * o.row_stride;
        const T* k = qkv + o.k + best * o.row_stride;
        T dot = 0;
        for (int64_t c = 0; c < hn; ++c) dot += q[c] * k[c];
        const T bias = d.alibi_slopes.empty() ? T(0)
                       : static_cast<T>(cpu::alibi_bias(d.alibi_slopes[static_cast<size_t>(head)], i, best));
        result = static_cast<L>(scale * dot + bias - std::log(row[best]));
      }
    }
}

// Reference backward: probs rebuilt from lse (p = exp(score - lse) on the attended keys), then the
// unfused attention backward (dropout 0).
template <typename T, typename L>
void cpu_flash_backward(const T* dout, const T* qkv, const L* lse, const uint8_t* mask, const int32_t* documents,
                        const cpu::AttentionDims& d, bool causal, T* dqkv) {
  const int64_t s = d.seq, hn = d.head_dim;
  std::vector<T> probs(static_cast<size_t>(d.batch * d.num_heads * s * s));
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(hn)));
  for (int64_t bi = 0; bi < d.batch; ++bi)
    for (int64_t head = 0; head < d.num_heads; ++head) {
      const HeadOffsets o = head_offsets(d, bi, head);
      T* p = probs.data() + (bi * d.num_heads + head) * s * s;
      cpu::gemm<T>(false, true, s, s, hn, scale, qkv + o.q, o.row_stride, qkv + o.k, o.row_stride, T(0), p, s);
      const double slope = d.alibi_slopes.empty() ? 0.0 : d.alibi_slopes[static_cast<size_t>(head)];
      for (int64_t i = 0; i < s; ++i) {
        const L row_lse = lse[(bi * d.num_heads + head) * s + i];
        T* row = p + i * s;
        for (int64_t j = 0; j < s; ++j) {
          const bool attends = cpu::attends(s, bi, i, j, causal, mask, documents) && !std::isinf(row_lse);
          const T bias = static_cast<T>(cpu::alibi_bias(slope, i, j));
          row[j] = attends ? std::exp(row[j] + bias - static_cast<T>(row_lse)) : T(0);
        }
      }
    }
  cpu::attention_backward<T>(dout, qkv, probs.data(), d, 0.0, RandomStream(0, 0), dqkv);
}

// Calls f(T{}, L{}) for the CPU storage dtype T of qkv and L of lse.
template <typename F>
void visit_cpu(const char* op, const Tensor& qkv, const Tensor& lse, F&& f) {
  detail::visit_f32_or_f64(op, qkv, "qkv", [&](auto tag) {
    using T = decltype(tag);
    if (lse.dtype() == DType::f32) f(T{}, float{});
    else f(T{}, double{});
  });
}

}  // namespace

bool flash_attention_supported(const Tensor& qkv, const AttentionParams& params) {
#ifdef TESSERA_HAVE_CUDA
  return qkv.defined() && qkv.device().is_cuda() && (qkv.dtype() == DType::bf16 || qkv.dtype() == DType::f16) &&
         (params.head_dim == 64 || params.head_dim == 128) && params.num_heads > 0 &&
         params.num_query_groups > 0 && params.num_heads % params.num_query_groups == 0 && qkv.ndim() == 3 &&
         qkv.dim(2) == (params.num_heads + 2 * params.num_query_groups) * params.head_dim && qkv.dim(1) < 65536 &&
         params.num_heads < 65536 && aligned16(qkv);
#else
  (void)qkv;
  (void)params;
  return false;
#endif
}

int64_t flash_attention_dropout_record_words(const Tensor& qkv, const AttentionParams& params) {
  if (params.dropout <= 0.0 || !flash_attention_supported(qkv, params)) return 0;
#ifdef TESSERA_HAVE_CUDA
  return cuda::flash_attention_dropout_record_words(qkv, params);
#else
  return 0;
#endif
}

void flash_attention_forward(const Tensor& qkv, const Tensor& key_padding_mask, const AttentionParams& params,
                             const Tensor& out, const Tensor& lse, const RandomStream* dropout_stream,
                             const Tensor& dropout_record) {
  const char* op = "flash_attention_forward";
  const cpu::AttentionDims d = flash_dims(op, qkv, params, dropout_stream);
  expect_tensor(out, qkv.dtype(), {d.seq, d.batch, d.num_heads * d.head_dim}, "flash_attention_forward: out");
  check_lse(op, qkv, d, lse);
  check_mask(op, key_padding_mask, d);
  check_document_ids(op, params, d.batch, d.seq, qkv.device());
  check_dropout_record(op, qkv, params, dropout_record);
  if (detail::runs_on_cuda(op, {&qkv, &key_padding_mask, &params.document_ids, &out, &lse, &dropout_record})) {
#ifdef TESSERA_HAVE_CUDA
    return cuda::flash_attention_forward(qkv, key_padding_mask, params, out, lse, dropout_stream, dropout_record);
#endif
  }
  if (detail::is_half(qkv.dtype())) {  // bf16 / f16 storage on the CPU: f32 compute
    detail::compute_in_f32({qkv, key_padding_mask, out, lse}, {false, false, true, true},
                           [&](const std::vector<Tensor>& t) { flash_attention_forward(t[0], t[1], params, t[2], t[3]); });
    return;
  }
  visit_cpu(op, qkv, lse, [&](auto tag, auto lse_tag) {
    using T = decltype(tag);
    using L = decltype(lse_tag);
    cpu_flash_forward<T, L>(qkv.data_as<T>(), mask_data(key_padding_mask), document_data(params), d, params.causal,
                            out.data_as<T>(), lse.data_as<L>());
  });
}

void flash_attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                              const Tensor& key_padding_mask, const AttentionParams& params, const Tensor& dqkv,
                              const RandomStream* dropout_stream, const Tensor& dropout_record) {
  const char* op = "flash_attention_backward";
  const cpu::AttentionDims d = flash_dims(op, qkv, params, dropout_stream);
  const Shape out_shape{d.seq, d.batch, d.num_heads * d.head_dim};
  expect_tensor(dout, qkv.dtype(), out_shape, "flash_attention_backward: dout");
  expect_tensor(out, qkv.dtype(), out_shape, "flash_attention_backward: out");
  check_lse(op, qkv, d, lse);
  check_mask(op, key_padding_mask, d);
  check_document_ids(op, params, d.batch, d.seq, qkv.device());
  detail::require_same_shape(op, qkv, "qkv", dqkv, "dqkv");
  detail::require_same_dtype(op, qkv, "qkv", dqkv, "dqkv");
  TESSERA_CHECK(dqkv.data() != qkv.data() || qkv.numel() == 0, op, ": dqkv must not alias qkv");
  check_dropout_record(op, qkv, params, dropout_record);
  if (detail::runs_on_cuda(op, {&dout, &qkv, &out, &lse, &key_padding_mask, &params.document_ids, &dqkv,
                                &dropout_record})) {
#ifdef TESSERA_HAVE_CUDA
    return cuda::flash_attention_backward(dout, qkv, out, lse, key_padding_mask, params, dqkv, dropout_stream,
                                          dropout_record);
#endif
  }
  if (detail::is_half(qkv.dtype())) {
    detail::compute_in_f32({dout, qkv, out, lse, key_padding_mask, dqkv}, {false, false, false, false, false, true},
                           [&](const std::vector<Tensor>& t) {
                             flash_attention_backward(t[0], t[1], t[2], t[3], t[4], params, t[5]);
                           });
    return;
  }
  visit_cpu(op, qkv, lse, [&](auto tag, auto lse_tag) {
    using T = decltype(tag);
    using L = decltype(lse_tag);
    cpu_flash_backward<T, L>(dout.data_as<T>(), qkv.data_as<T>(), lse.data_as<L>(), mask_data(key_padding_mask),
                             document_data(params), d, params.causal, dqkv.data_as<T>());
  });
}

}  // namespace tessera::ops
