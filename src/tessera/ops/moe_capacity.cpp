// Expert capacity and dropping over it (moe_capacity.h).
#include "tessera/ops/moe_capacity.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "tessera/core/error.h"

namespace tessera::ops {

int64_t moe_expert_capacity(int64_t tokens, int64_t topk, int64_t num_experts, double capacity_factor) {
  TESSERA_CHECK(tokens >= 0 && topk >= 1 && num_experts >= 1 && capacity_factor > 0, "moe_expert_capacity: ", tokens,
                " tokens, topk ", topk, ", ", num_experts, " experts, factor ", capacity_factor);
  const double c = std::ceil(static_cast<double>(tokens * topk) / static_cast<double>(num_experts) * capacity_factor);
  return std::min<int64_t>(static_cast<int64_t>(c), tokens);
}

int64_t moe_drop_over_capacity(Routing& r, int64_t capacity) {
  TESSERA_CHECK(capacity >= 0, "moe_drop_over_capacity: capacity ", capacity);
  std::vector<std::vector<size_t>> slots(static_cast<size_t>(r.num_experts));
  for (size_t s = 0; s < r.experts.size(); ++s)
    if (r.kept[s]) slots[static_cast<size_t>(r.experts[s])].push_back(s);
  int64_t dropped = 0;
  for (auto& list : slots) {
    if (static_cast<int64_t>(list.size()) <= capacity) continue;
    // Highest weight first; ties: the earlier slot (earlier token).
    std::stable_sort(list.begin(), list.end(), [&](size_t a, size_t b) { return r.probs[a] > r.probs[b]; });
    for (size_t i = static_cast<size_t>(capacity); i < list.size(); ++i) {
      r.kept[list[i]] = 0;
      r.probs[list[i]] = 0.0f;
      ++dropped;
    }
  }
  return dropped;
}

}  // namespace tessera::ops
