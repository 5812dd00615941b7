// Mixture-of-experts router (Megatron's TopKRouter on the CPU): from the router logits x W_r^T
// [T, E] it picks each token's top-k experts and their combine weights (probs):
//   softmax (default):   top-k on the logits, probs = softmax over the k chosen logits;
//   softmax, pre_softmax: scores = softmax over all E, top-k on them, probs = the chosen scores
//                         (not renormalised);
//   sigmoid:             scores = sigmoid(logits), top-k on them, probs = chosen / sum(chosen) (k > 1)
//                         or the chosen score (k = 1).
// Ties pick the lower expert index, so the choice is a pure function of the logits. f32 host tensors.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::ops {

enum class RouterScore { softmax, sigmoid };
RouterScore parse_router_score(const std::string& name);  // model.moe_router_score_function

struct RouterOptions {
  int64_t topk = 2;
  RouterScore score = RouterScore::softmax;
  bool pre_softmax = false;
};

// The routing of T tokens to E experts, k per token; slot t*k + j is token t's j-th choice.
struct Routing {
  int64_t tokens = 0, topk = 0, num_experts = 0;
  std::vector<int32_t> experts;  // [T*k] by descending score
  std::vector<float> probs;      // [T*k] combine weights (0 for a dropped slot)
  std::vector<uint8_t> kept;     // [T*k] 1 unless dropped over capacity (moe_capacity.h)
  // Assignments per expert [E]: every chosen slot (routed) or only the kept ones.
  std::vector<int64_t> routed_per_expert() const;
  std::vector<int64_t> kept_per_expert() const;
};

// logits f32 [T, E] on the CPU -> routing (every slot kept).
Routing moe_router_forward(const Tensor& logits, const RouterOptions& options);
// dprobs [T*k] (d loss / d routing.probs; dropped slots are ignored) -> dlogits f32 [T, E], overwritten.
void moe_router_backward(const Tensor& logits, const Routing& routing, const RouterOptions& options,
                         std::span<const float> dprobs, const Tensor& dlogits);

}  // namespace tessera::ops
