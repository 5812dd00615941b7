// Expert capacity and token dropping (Megatron's --moe-expert-capacity-factor, drop policy
// "probs"): each expert takes at most C = ceil(T k / E x factor) slots (at most T); the slots of an
// expert beyond C are dropped, lowest combine weight first (ties: the later token), their weight
// set to 0 and kept = 0. Padding (--moe-pad-expert-input-to-capacity) is the permutation's
// (moe_permute.h: rows_per_expert = C).
#pragma once
#include <cstdint>

#include "tessera/ops/moe_router.h"

namespace tessera::ops {

int64_t moe_expert_capacity(int64_t tokens, int64_t topk, int64_t num_experts, double capacity_factor);
// Drops the slots over `capacity` per expert; returns how many were dropped.
int64_t moe_drop_over_capacity(Routing& routing, int64_t capacity);

}  // namespace tessera::ops
