// CUDA host side of the fused attention (kernels/flash_attention.cu): CUDA-specific checks (dtype,
// alignment), launch on CudaContext's stream, backward scratch from ScratchSlot::flash_attention_backward,
// the attention dropout's Philox key, stream and index space.
#include <cmath>
#include <cstdint>

#include "kernels/flash_attention.h"
#include "tessera/ops/cuda/cuda_context.h"
#include "tessera/ops/cuda/dropout_args.h"
#include "tessera/ops/flash_attention.h"
#include "tessera/ops/op_checks.h"

namespace tessera::ops::cuda {

namespace {

// The dispatcher (ops/flash_attention.cpp) has checked shapes and dtypes; this checks what the kernels
// additionally assume and returns their arguments.
kernels::FlashAttentionArgs kernel_args(const char* op, const Tensor& qkv, const AttentionParams& params,
                                        const RandomStream* dropout_stream,
                                        std::initializer_list<std::pair<const Tensor*, const char*>> aligned) {
  TESSERA_CHECK(kernels::flash_attention_kernel_exists(qkv.dtype(), params.head_dim), op,
                ": no fused kernel for qkv ", qkv.describe(), " with head_dim ", params.head_dim,
                " (bf16/f16, head_dim 64 or 128)");
  for (const auto& [t, name] : aligned)
    if (t->defined() && t->data())
      TESSERA_CHECK(reinterpret_cast<uintptr_t>(t->data()) % 16 == 0, op, ": ", name,
                    " must be 16-byte aligned for the fused kernel, got ", t->describe(), " at ", t->data());
  kernels::FlashAttentionArgs a;
  a.seq = qkv.dim(0);
  a.batch = qkv.dim(1);
  a.num_heads = params.num_heads;
  a.num_query_groups = params.num_query_groups;
  a.head_dim = params.head_dim;
  a.causal = params.causal;
  a.softmax_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(params.head_dim)));
  if (params.alibi) {
    (void)attention_alibi_slopes(params);  // checks the head range
    a.alibi_heads = params.alibi_heads > 0 ? params.alibi_heads : params.num_heads;
    a.alibi_first_head = params.alibi_first_head;
  }
  // The dispatcher checked document_ids (i32 [b, s] on qkv's device).
  if (params.document_ids.defined()) a.document_ids = static_cast<const int32_t*>(params.document_ids.data());
  if (params.dropout > 0.0) {  // the dispatcher checked that the stream is there
    a.dropout = dropout_args(*dropout_stream, params.dropout, 0);
    a.dropout_heads = params.dropout_heads > 0 ? params.dropout_heads : params.num_heads;
    a.dropout_first_head = params.dropout_first_head;
    TESSERA_CHECK(a.dropout_first_head + params.num_heads <= a.dropout_heads, op, ": heads [",
                  a.dropout_first_head, ", ", a.dropout_first_head + params.num_heads, ") outside the ",
                  a.dropout_heads, " heads of the dropout index");
  }
  return a;
}

const uint8_t* mask_pointer(const Tensor& key_padding_mask) {
  return key_padding_mask.defined() ? static_cast<const uint8_t*>(key_padding_mask.data()) : nullptr;
}

uint32_t* record_pointer(const Tensor& dropout_record) {
  return dropout_record.defined() ? static_cast<uint32_t*>(dropout_record.data()) : nullptr;
}

}  // namespace

int64_t flash_attention_dropout_record_words(const Tensor& qkv, const AttentionParams& params) {
  const RandomStream any(0, 0);  // the record's size does not depend on the stream's key
  const kernels::FlashAttentionArgs a =
      kernel_args("flash_attention_dropout_record_words", qkv, params, params.dropout > 0.0 ? &any : nullptr, {});
  return static_cast<int64_t>(kernels::flash_attention_dropout_record_bytes(a) / sizeof(uint32_t));
}

void flash_attention_forward(const Tensor& qkv, const Tensor& key_padding_mask, const AttentionParams& params,
                             const Tensor& out, const Tensor& lse, const RandomStream* dropout_stream,
                             const Tensor& dropout_record) {
  const char* op = "flash_attention_forward";
  kernels::FlashAttentionArgs a = kernel_args(op, qkv, params, dropout_stream, {{&qkv, "qkv"}, {&out, "out"}});
  a.dropout_record = record_pointer(dropout_record);
  kernels::flash_attention_forward(qkv.dtype(), qkv.data(), mask_pointer(key_padding_mask), a, out.data(),
                                   static_cast<float*>(lse.data()), CudaContext::get().stream());
}

void flash_attention_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                              const Tensor& key_padding_mask, const AttentionParams& params, const Tensor& dqkv,
                              const RandomStream* dropout_stream, const Tensor& dropout_record) {
  const char* op = "flash_attention_backward";
  kernels::FlashAttentionArgs a = kernel_args(op, qkv, params, dropout_stream,
                                              {{&qkv, "qkv"}, {&dout, "dout"}, {&out, "out"}, {&dqkv, "dqkv"}});
  a.dropout_record = record_pointer(dropout_record);
  if (a.seq == 0 || a.batch == 0) return;
  a.deterministic = deterministic_mode();
  CudaContext& context = CudaContext::get();
  void* scratch = context.scratch(ScratchSlot::flash_attention_backward, kernels::flash_attention_backward_scratch_bytes(a));
  kernels::flash_attention_backward(qkv.dtype(), dout.data(), qkv.data(), out.data(), static_cast<const float*>(lse.data()),
                                    mask_pointer(key_padding_mask), a, dqkv.data(), scratch, context.stream());
}

}  // namespace tessera::ops::cuda
