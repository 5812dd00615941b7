// Row-major GEMMs through cuBLASLt: C[M, N] = alpha op(A) op(B) + beta C (+ bias[N] epilogue),
// optionally strided-batched. A and B share a storage dtype (f32, bf16, f16); C may be that dtype or
// f32 (the weight-gradient GEMM accumulating into the fp32 main grad with beta = 1). fp32 compute.
// Plans (descriptors + heuristic algorithm) are cached by shape, dtypes and pointer alignment.
#pragma once
#include <library_types.h>

#include <cstdint>

#include "tessera/core/dtype.h"

namespace tessera::ops::cuda {

// The cuBLAS / cuBLASLt data type of a storage dtype (f32, bf16, f16); Error for any other.
cudaDataType_t cuda_data_type(DType t);

struct GemmDesc {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;  // row-major leading dimensions (elements)
  int64_t batch = 1, stride_a = 0, stride_b = 0, stride_c = 0;
  DType ab_dtype = DType::f32, c_dtype = DType::f32;
};

// bias (nullable): [n] of c_dtype, added to every row. c_in (nullable): the C that beta scales, in c's
// layout (c = alpha op(A) op(B) + beta c_in + bias: a residual added in the epilogue); null: c itself.
void gemm(const GemmDesc& desc, float alpha, const void* a, const void* b, float beta, void* c,
          const void* bias = nullptr, const void* c_in = nullptr);

// C = gelu(op(A) op(B) + bias) with pre_activation (C's layout and dtype) = op(A) op(B) + bias, in
// one GEMM (cuBLASLt GELU_AUX_BIAS, or GELU_AUX when bias is null; the tanh GeLU as ops::gelu_forward).
// batch 1, alpha 1, beta 0. False, with nothing done, when cuBLASLt has no algorithm for it here.
bool gemm_gelu_aux(const GemmDesc& desc, const void* a, const void* b, void* c, const void* bias,
                   void* pre_activation);
// C = (op(A) op(B)) * gelu'(pre_activation) elementwise (cuBLASLt DGELU; pre_activation as written by
// gemm_gelu_aux, C's layout). batch 1, alpha 1, beta 0. False, with nothing done, when unsupported.
bool gemm_dgelu(const GemmDesc& desc, const void* a, const void* b, void* c, const void* pre_activation);

}  // namespace tessera::ops::cuda
