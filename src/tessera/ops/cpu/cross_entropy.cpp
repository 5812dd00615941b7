// CPU reference of cross entropy with vocabulary padding excluded (see cross_entropy.h).
#include "tessera/ops/cpu/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/ops/cpu/exp_polynomial.h"

namespace tessera::ops::cpu {

namespace {
void check_targets(const char* op, const int32_t* targets, int64_t n, int64_t valid_vocab) {
  for (int64_t i = 0; i < n; ++i)
    if (targets[i] < 0 || targets[i] >= valid_vocab)
      TESSERA_FAIL(op, ": target ", targets[i], " at position ", i, " is outside the valid vocabulary [0, ",
                   valid_vocab, ")");
}
}  // namespace

template <typename T>
void cross_entropy_forward(const T* logits, const int32_t* targets, int64_t n, int64_t vocab, int64_t valid_vocab,
                           T* losses, T* log_sum_exp) {
  check_targets("cross_entropy_forward", targets, n, valid_vocab);
  std::vector<T> exps(static_cast<size_t>(valid_vocab));
  for (int64_t i = 0; i < n; ++i) {
    const T* row = logits + i * vocab;
    const T row_max = max_of<T>(row, valid_vocab);
    const double sum = exp_shifted_and_sum<T>(row, valid_vocab, row_max, exps.data());
    const T lse = row_max + static_cast<T>(std::log(sum));
    log_sum_exp[i] = lse;
    losses[i] = lse - row[targets[i]];
  }
}

template <typename T>
void cross_entropy_backward(const T* logits, const int32_t* targets, const T* log_sum_exp, const T* dlosses,
                            int64_t n, int64_t vocab, int64_t valid_vocab, T* dlogits) {
  check_targets("cross_entropy_backward", targets, n, valid_vocab);
  for (int64_t i = 0; i < n; ++i) {
    const T* row = logits + i * vocab;
    T* grad = dlogits + i * vocab;
    const T lse = log_sum_exp[i], scale = dlosses[i];
    scaled_exp_shifted<T>(row, valid_vocab, lse, scale, grad);
    grad[targets[i]] -= scale;
    std::fill(grad + valid_vocab, grad + vocab, T(0));
  }
}

template void cross_entropy_forward<float>(const float*, const int32_t*, int64_t, int64_t, int64_t, float*, float*);
template void cross_entropy_forward<double>(const double*, const int32_t*, int64_t, int64_t, int64_t, double*,
                                            double*);
template void cross_entropy_backward<float>(const float*, const int32_t*, const float*, const float*, int64_t, int64_t,
                                            int64_t, float*);
template void cross_entropy_backward<double>(const double*, const int32_t*, const double*, const double*, int64_t,
                                             int64_t, int64_t, double*);

}  // namespace tessera::ops::cpu
