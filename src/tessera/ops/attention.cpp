// Core self-attention dispatch: checks devices, dtypes, shapes and parameters, then runs the CPU
// reference (cpu/attention.h).
#include "tessera/ops/attention.h"

#include <string>

#include "tessera/ops/alibi.h"
#include "tessera/ops/cpu/attention.h"
#include "tessera/ops/half_compute.h"
#include "tessera/ops/cuda_dispatch.h"
#include "tessera/ops/op_checks.h"

namespace tessera::ops {

std::vector<double> attention_alibi_slopes(const AttentionParams& params) {
  if (!params.alibi) return {};
  const int64_t total = params.alibi_heads > 0 ? params.alibi_heads : params.num_heads;
  TESSERA_CHECK(params.alibi_first_head >= 0 && params.alibi_first_head + params.num_heads <= total,
                "attention: ALiBi heads [", params.alibi_first_head, ", ", params.alibi_first_head + params.num_heads,
                ") must lie within the ", total, " heads of alibi_heads");
  return alibi_slopes(total, params.alibi_first_head, params.num_heads);
}

void check_document_ids(const char* op, const AttentionParams& params, int64_t batch, int64_t seq, Device device) {
  const Tensor& ids = params.document_ids;
  if (!ids.defined() || ids.data() == nullptr) return;
  expect_tensor(ids, DType::i32, {batch, seq}, (std::string(op) + ": params.document_ids (i32 [b, s])").c_str());
  TESSERA_CHECK(ids.device() == device, op, ": params.document_ids must be on qkv's device, got ", ids.describe());
}

namespace {

const int32_t* document_data(const AttentionParams& params) {
  return params.document_ids.defined() ? static_cast<const int32_t*>(params.document_ids.data()) : nullptr;
}

// Validates params and qkv [s, b, (na + 2 ng) hn]; returns the dimensions.
cpu::AttentionDims attention_dims(const char* op, const Tensor& qkv, const AttentionParams& params) {
  TESSERA_CHECK(params.num_heads > 0 && params.num_query_groups > 0 && params.head_dim > 0, op,
                ": num_heads, num_query_groups and head_dim must be positive, got ", params.num_heads, ", ",
                params.num_query_groups, ", ", params.head_dim);
  TESSERA_CHECK(params.num_heads % params.num_query_groups == 0, op, ": num_heads (", params.num_heads,
                ") must be a multiple of num_query_groups (", params.num_query_groups, ")");
  TESSERA_CHECK(params.dropout >= 0.0 && params.dropout < 1.0, op, ": attention dropout must be in [0, 1), got ",
                params.dropout);
  const int64_t width = (params.num_heads + 2 * params.num_query_groups) * params.head_dim;
  if (qkv.ndim() != 3 || qkv.dim(2) != width)
    TESSERA_FAIL(op, ": qkv must be [s, b, (num_heads + 2 num_query_groups) head_dim] = [s, b, ", width,
                 "], got ", qkv.describe());
  const int64_t dropout_heads = params.dropout_heads > 0 ? params.dropout_heads : params.num_heads;
  TESSERA_CHECK(params.dropout_first_head >= 0 && params.dropout_first_head + params.num_heads <= dropout_heads, op,
                ": dropout heads [", params.dropout_first_head, ", ", params.dropout_first_head + params.num_heads,
                ") must lie within the ", dropout_heads, " heads of dropout_heads");
  cpu::AttentionDims dims;
  dims.alibi_slopes = attention_alibi_slopes(params);
  dims.dropout_heads = dropout_heads;
  dims.dropout_first_head = params.dropout_first_head;
  dims.seq = qkv.dim(0);
  dims.batch = qkv.dim(1);
  dims.num_heads = params.num_heads;
  dims.num_query_groups = params.num_query_groups;
  dims.head_dim = params.head_dim;
  return dims;
}

// out (or dout) [s, b, na hn] and probs [b, na, s, s], both of qkv's dtype; names carry the op.
void check_out_and_probs(const Tensor& qkv, const cpu::AttentionDims& d, const Tensor& out, const char* out_name,
                         const Tensor& probs, const char* probs_name) {
  expect_tensor(out, qkv.dtype(), {d.seq, d.batch, d.num_heads * d.head_dim}, out_name);
  expect_tensor(probs, qkv.dtype(), {d.batch, d.num_heads, d.seq, d.seq}, probs_name);
}

}  // namespace

void attention_forward(const Tensor& qkv, const Tensor& key_padding_mask, const AttentionParams& params,
                       const RandomStream& dropout_stream, const Tensor& out, const Tensor& probs) {
  const char* op = "attention_forward";
  if (detail::is_half(qkv.dtype()) && qkv.device().is_cpu()) {  // bf16 / f16 on the CPU: f32 compute
    detail::compute_in_f32({qkv, key_padding_mask, out, probs}, {false, false, true, true}, [&](const std::vector<Tensor>& t) { attention_forward(t[0], t[1], params, dropout_stream, t[2], t[3]); });
    return;
  }
  if (detail::runs_on_cuda(op, {&qkv, &key_padding_mask, &params.document_ids, &out, &probs})) return TESSERA_CUDA_OP(attention_forward(qkv, key_padding_mask, params, dropout_stream, out, probs));
  const cpu::AttentionDims d = attention_dims(op, qkv, params);
  check_out_and_probs(qkv, d, out, "attention_forward: out", probs, "attention_forward: probs");
  if (key_padding_mask.defined())
    expect_tensor(key_padding_mask, DType::u8, {d.batch, d.seq}, "attention_forward: key_padding_mask (1 = attend)");
  check_document_ids(op, params, d.batch, d.seq, qkv.device());
  detail::visit_f32_or_f64(op, qkv, "qkv", [&](auto tag) {
    using T = decltype(tag);
    cpu::attention_forward<T>(qkv.data_as<T>(),
                              key_padding_mask.defined() ? key_padding_mask.data_as<uint8_t>() : nullptr,
                              document_data(params), d, params.causal, params.dropout, dropout_stream,
                              out.data_as<T>(), probs.data_as<T>());
  });
}

void attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& probs, const AttentionParams& params,
                        const RandomStream& dropout_stream, const Tensor& dqkv) {
  const char* op = "attention_backward";
  if (detail::is_half(qkv.dtype()) && qkv.device().is_cpu()) {  // bf16 / f16 on the CPU: f32 compute
    detail::compute_in_f32({dout, qkv, probs, dqkv}, {false, false, false, true}, [&](const std::vector<Tensor>& t) { attention_backward(t[0], t[1], t[2], params, dropout_stream, t[3]); });
    return;
  }
  if (detail::runs_on_cuda(op, {&dout, &qkv, &probs, &dqkv})) return TESSERA_CUDA_OP(attention_backward(dout, qkv, probs, params, dropout_stream, dqkv));
  const cpu::AttentionDims d = attention_dims(op, qkv, params);
  check_out_and_probs(qkv, d, dout, "attention_backward: dout", probs, "attention_backward: probs");
  detail::require_same_shape(op, qkv, "qkv", dqkv, "dqkv");
  detail::require_same_dtype(op, qkv, "qkv", dqkv, "dqkv");
  TESSERA_CHECK(dqkv.data() != qkv.data() || qkv.numel() == 0, op, ": dqkv must not alias qkv");
  detail::visit_f32_or_f64(op, qkv, "qkv", [&](auto tag) {
    using T = decltype(tag);
    cpu::attention_backward<T>(dout.data_as<T>(), qkv.data_as<T>(), probs.data_as<T>(), d, params.dropout,
                               dropout_stream, dqkv.data_as<T>());
  });
}

}  // namespace tessera::ops
