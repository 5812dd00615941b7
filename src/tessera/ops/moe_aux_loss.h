// The router's auxiliary losses (Megatron's moe_utils.switch_load_balancing_loss_func and
// z_loss_func), values without their coefficients, on f32 host logits [T, E]:
//   load balancing (Switch / GShard): scores = softmax(logits) over all E (sigmoid router:
//     sigmoid(logits) / its row sum); c_i = slots routed to expert i (top-k, before any dropping);
//     L_aux = E / (k T^2) * sum_i (sum_t scores[t, i]) * c_i     (1 when perfectly balanced)
//   z-loss: L_z = mean_t logsumexp(logits[t, :])^2
// The backward functions ADD dloss * d(L)/d(logits) to dlogits (the counts c_i are constants).
#pragma once
#include <cstdint>
#include <span>

#include "tessera/core/tensor.h"
#include "tessera/ops/moe_router.h"

namespace tessera::ops {

double moe_aux_loss_forward(const Tensor& logits, std::span<const int64_t> routed_per_expert, int64_t topk,
                            RouterScore score);
void moe_aux_loss_backward(const Tensor& logits, std::span<const int64_t> routed_per_expert, int64_t topk,
                           RouterScore score, double dloss, const Tensor& dlogits);

double moe_z_loss_forward(const Tensor& logits);
void moe_z_loss_backward(const Tensor& logits, double dloss, const Tensor& dlogits);

}  // namespace tessera::ops
