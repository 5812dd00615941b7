// CPU reference of the embedding lookup and its scatter-add gradient (see embedding.h).
#include "tessera/ops/cpu/embedding.h"

#include <algorithm>

#include "tessera/core/error.h"

namespace tessera::ops::cpu {

namespace {
void check_ids(const char* op, const int32_t* ids, int64_t n, int64_t vocab) {
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= vocab)
      TESSERA_FAIL(op, ": token id ", ids[i], " at position ", i, " is outside the vocabulary [0, ", vocab, ")");
}
}  // namespace

template <typename T>
void embedding_forward(const int32_t* ids, int64_t n, const T* table, int64_t vocab, int64_t hidden, T* out) {
  check_ids("embedding_forward", ids, n, vocab);
  for (int64_t i = 0; i < n; ++i) std::copy_n(table + int64_t(ids[i]) * hidden, hidden, out + i * hidden);
}

template <typename T>
void embedding_backward(const int32_t* ids, int64_t n, const T* dout, int64_t vocab, int64_t hidden, T* dtable) {
  check_ids("embedding_backward", ids, n, vocab);
  for (int64_t i = 0; i < n; ++i) {
    T* row = dtable + int64_t(ids[i]) * hidden;
    const T* grad = dout + i * hidden;
    for (int64_t j = 0; j < hidden; ++j) row[j] += grad[j];
  }
}

template void embedding_forward<float>(const int32_t*, int64_t, const float*, int64_t, int64_t, float*);
template void embedding_forward<double>(const int32_t*, int64_t, const double*, int64_t, int64_t, double*);
template void embedding_backward<float>(const int32_t*, int64_t, const float*, int64_t, int64_t, float*);
template void embedding_backward<double>(const int32_t*, int64_t, const double*, int64_t, int64_t, double*);

}  // namespace tessera::ops::cpu
