// CBLAS-backed GEMM for the CPU reference ops (see blas.h).
#include "tessera/ops/cpu/blas.h"

#include <cblas.h>

#include <climits>
#include <type_traits>

#include "tessera/core/error.h"

namespace tessera::ops::cpu {

namespace {

void check_blas_size(int64_t value, const char* what) {
  TESSERA_CHECK(value >= 0 && value <= INT_MAX, "GEMM ", what, " = ", value, " does not fit CBLAS's int");
}

template <typename T>
void scale_output(int64_t m, int64_t n, T beta, T* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == T(0) ? T(0) : c[i * ldc + j] * beta;
}

}  // namespace

template <typename T>
void gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
          const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // nothing to multiply: C = beta C (CBLAS implementations differ on k = 0)
    scale_output(m, n, beta, c, ldc);
    return;
  }
  check_blas_size(m, "m");
  check_blas_size(n, "n");
  check_blas_size(k, "k");
  check_blas_size(lda, "lda");
  check_blas_size(ldb, "ldb");
  check_blas_size(ldc, "ldc");
  const CBLAS_TRANSPOSE ta = transpose_a ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE tb = transpose_b ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, ta, tb, int(m), int(n), int(k), alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
  } else {
    cblas_dgemm(CblasRowMajor, ta, tb, int(m), int(n), int(k), alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
  }
}

template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t,
                          float, float*, int64_t);
template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t, const double*,
                           int64_t, double, double*, int64_t);

}  // namespace tessera::ops::cpu
