// Row-major GEMM for the CPU reference ops, through CBLAS (OpenBLAS): C = alpha op(A) op(B) + beta C.
// Instantiated for float (cblas_sgemm) and double (cblas_dgemm).
#pragma once
#include <cstdint>

namespace tessera::ops::cpu {

// op(A) is [m, k], op(B) is [k, n], C is [m, n]; leading dimensions are row strides in elements.
template <typename T>
void gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
          const T* b, int64_t ldb, T beta, T* c, int64_t ldc);

}  // namespace tessera::ops::cpu
