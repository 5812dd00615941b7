// CPU reference of counter-based dropout (see dropout.h).
#include "tessera/ops/cpu/dropout.h"

#include <algorithm>

namespace tessera::ops::cpu {

template <typename T>
void dropout_apply(const T* in, int64_t n, double p, const RandomStream& stream, uint64_t index_offset, T* out) {
  if (p == 0.0) {
    if (in != out) std::copy_n(in, n, out);
    return;
  }
  const T keep_scale = static_cast<T>(1.0 / (1.0 - p));
  for (int64_t i = 0; i < n; ++i)
    out[i] = dropout_keeps(stream, index_offset + static_cast<uint64_t>(i), p) ? in[i] * keep_scale : T(0);
}

template void dropout_apply<float>(const float*, int64_t, double, const RandomStream&, uint64_t, float*);
template void dropout_apply<double>(const double*, int64_t, double, const RandomStream&, uint64_t, double*);

}  // namespace tessera::ops::cpu
