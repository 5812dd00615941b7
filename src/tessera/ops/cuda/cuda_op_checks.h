// Argument checks specific to the CUDA ops: storage dtypes (f32, bf16, f16) and the "fp32 or like
// the activations" rule for main-grad / statistics tensors.
#pragma once
#include "tessera/core/tensor.h"
#include "tessera/ops/op_checks.h"

namespace tessera::ops::cuda {

inline void require_storage_dtype(const char* op, const Tensor& t, const char* name) {
  if (t.dtype() != DType::f32 && t.dtype() != DType::bf16 && t.dtype() != DType::f16)
    TESSERA_FAIL(op, ": ", name, " must be f32, bf16 or f16 on CUDA, got ", t.describe());
}

// t must have the dtype of `like` or be f32 (fp32 main grads and statistics).
inline void require_like_or_f32(const char* op, const Tensor& like, const char* like_name, const Tensor& t,
                                const char* name) {
  if (t.dtype() != like.dtype() && t.dtype() != DType::f32)
    TESSERA_FAIL(op, ": ", name, " must be f32 or the dtype of ", like_name, " (", dtype_name(like.dtype()), "), got ",
                 t.describe());
}

}  // namespace tessera::ops::cuda
