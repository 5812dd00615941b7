#include "tessera/ops/alibi.h"

#include <cmath>

#include "tessera/core/error.h"

namespace tessera::ops {

double alibi_slope(int64_t head, int64_t num_heads) {
  TESSERA_CHECK(num_heads > 0 && head >= 0 && head < num_heads, "alibi_slope: head ", head, " outside [0, ",
                num_heads, ")");
  int64_t p = 1;
  while (p * 2 <= num_heads) p *= 2;  // closest power of two <= num_heads
  if (head < p) return std::exp2(-8.0 * static_cast<double>(head + 1) / static_cast<double>(p));
  const int64_t k = head - p;
  return std::exp2(-8.0 * static_cast<double>(2 * k + 1) / static_cast<double>(2 * p));
}

std::vector<double> alibi_slopes(int64_t num_heads, int64_t first_head, int64_t count) {
  if (count < 0) count = num_heads - first_head;
  TESSERA_CHECK(first_head >= 0 && count >= 0 && first_head + count <= num_heads, "alibi_slopes: heads [",
                first_head, ", ", first_head + count, ") outside the ", num_heads, " heads");
  std::vector<double> slopes(static_cast<size_t>(count));
  for (int64_t h = 0; h < count; ++h) slopes[static_cast<size_t>(h)] = alibi_slope(first_head + h, num_heads);
  return slopes;
}

}  // namespace tessera::ops
