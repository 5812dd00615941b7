#include "tessera/ops/cpu/cached_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace tessera::ops::cpu {

template <typename T>
void cached_attention_forward(const T* qkv, const uint8_t* key_mask, const CachedAttentionDims& d, T* k_cache,
                              T* v_cache, T* out) {
  const int64_t hn = d.head_dim, ng = d.num_query_groups, per_group = d.num_heads / ng;
  const int64_t width = (d.num_heads + 2 * ng) * hn, cache_row = ng * hn;
  // 1. The new tokens' keys and values into the cache.
  for (int64_t s = 0; s < d.tokens; ++s)
    for (int64_t b = 0; b < d.batch; ++b) {
      const T* row = qkv + (s * d.batch + b) * width;
      const int64_t slot = (b * d.capacity + d.past + s) * cache_row;
      for (int64_t g = 0; g < ng; ++g) {
        const T* k = row + g * (per_group + 2) * hn + per_group * hn;
        std::memcpy(k_cache + slot + g * hn, k, sizeof(T) * hn);
        std::memcpy(v_cache + slot + g * hn, k + hn, sizeof(T) * hn);
      }
    }
  // 2. Each new query over the cached keys up to its own index.
  const double scale = 1.0 / std::sqrt(static_cast<double>(hn));
  std::vector<double> scores(static_cast<size_t>(d.past + d.tokens)), acc(static_cast<size_t>(hn));
  for (int64_t s = 0; s < d.tokens; ++s)
    for (int64_t b = 0; b < d.batch; ++b) {
      const T* row = qkv + (s * d.batch + b) * width;
      const int64_t last = d.past + s;  // inclusive
      for (int64_t h = 0; h < d.num_heads; ++h) {
        const int64_t g = h / per_group;
        const T* q = row + g * (per_group + 2) * hn + (h % per_group) * hn;
        const double slope = d.alibi_slopes.empty() ? 0.0 : d.alibi_slopes[static_cast<size_t>(h)];
        double max_score = -INFINITY;
        for (int64_t j = 0; j <= last; ++j) {
          if (key_mask && !key_mask[b * d.capacity + j]) {
            scores[j] = -INFINITY;
            continue;
          }
          const T* k = k_cache + (b * d.capacity + j) * cache_row + g * hn;
          double dot = 0;
          for (int64_t e = 0; e < hn; ++e) dot += static_cast<double>(q[e]) * static_cast<double>(k[e]);
          scores[j] = dot * scale - slope * static_cast<double>(last - j);
          max_score = std::max(max_score, scores[j]);
        }
        T* o = out + (s * d.batch + b) * d.num_heads * hn + h * hn;
        if (max_score == -INFINITY) {  // no key to attend
          std::fill(o, o + hn, T(0));
          continue;
        }
        double sum = 0;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = 0; j <= last; ++j) {
          if (scores[j] == -INFINITY) continue;
          const double p = std::exp(scores[j] - max_score);
          sum += p;
          const T* v = v_cache + (b * d.capacity + j) * cache_row + g * hn;
          for (int64_t e = 0; e < hn; ++e) acc[e] += p * static_cast<double>(v[e]);
        }
        for (int64_t e = 0; e < hn; ++e) o[e] = static_cast<T>(acc[e] / sum);
      }
    }
}

template void cached_attention_forward<float>(const float*, const uint8_t*, const CachedAttentionDims&, float*, float*,
                                              float*);
template void cached_attention_forward<double>(const double*, const uint8_t*, const CachedAttentionDims&, double*,
                                               double*, double*);

}  // namespace tessera::ops::cpu
