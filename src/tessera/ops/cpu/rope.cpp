// CPU reference of rotary position embedding (see rope.h).
#include "tessera/ops/cpu/rope.h"

#include <cmath>
#include <vector>

namespace tessera::ops::cpu {

template <typename T>
void rope_apply(T* rows, const RopeGeometry& g, double theta, const int32_t* positions, bool positions_per_batch,
                bool inverse, bool positions_per_row) {
  const int64_t rotary_dim = g.rotary_dim > 0 ? g.rotary_dim : g.head_dim, half = rotary_dim / 2;
  std::vector<double> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) inv_freq[i] = 1.0 / std::pow(theta, double(2 * i) / double(rotary_dim));
  const double sign = inverse ? -1.0 : 1.0;
  for (int64_t s = 0; s < g.seq; ++s)
    for (int64_t b = 0; b < g.batch; ++b) {
      const int64_t position = !positions ? s
                               : positions_per_row ? positions[s * g.batch + b]
                               : positions_per_batch ? positions[b * g.seq + s] : positions[s];
      T* row = rows + (s * g.batch + b) * g.row_width + g.offset;
      for (int64_t i = 0; i < half; ++i) {
        const double angle = double(position) * inv_freq[i];
        const double c = std::cos(angle), sn = sign * std::sin(angle);
        for (int64_t group = 0; group < g.groups; ++group)
          for (int64_t h = 0; h < g.heads; ++h) {
            T* x = row + group * g.group_stride + h * g.head_dim;
            const int64_t i1 = g.interleaved ? 2 * i : i, i2 = g.interleaved ? 2 * i + 1 : i + half;
            const double x1 = x[i1], x2 = x[i2];
            x[i1] = static_cast<T>(x1 * c - x2 * sn);
            x[i2] = static_cast<T>(x2 * c + x1 * sn);
          }
      }
    }
}

template void rope_apply<float>(float*, const RopeGeometry&, double, const int32_t*, bool, bool, bool);
template void rope_apply<double>(double*, const RopeGeometry&, double, const int32_t*, bool, bool, bool);

}  // namespace tessera::ops::cpu
