// Token choice from one row of logits, as Megatron's text generation defines it
// (megatron/inference/text_generation/sampling.py and generation.py):
// - top_k == 1: greedy (argmax; the lowest id wins a tie);
// - otherwise logits / temperature, then top-k (keep the logits >= the k-th largest) or top-p
//   (keep the smallest set of most likely tokens whose probability reaches top_p: a token is dropped
//   when the cumulative probability of the tokens before it, in descending order, already exceeds
//   top_p; the most likely token is always kept), then softmax and one draw;
// - top-k and top-p together are refused, as in Megatron;
// - after each step top_p <- top_p * top_p_decay (when both > 0), floored at top_p_bound (when > 0).
// Draws are seeded: RandomStream(seed, "generate.sample") at index step * batch + row, so a run is
// reproducible and does not depend on the parallel layout.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace tessera::generate {

struct SamplingParams {
  int64_t top_k = 1;  // 1: greedy; 0: no top-k filter
  double top_p = 0.0;  // 0: no top-p filter
  double temperature = 1.0;
  double top_p_decay = 0.0;
  double top_p_bound = 0.0;
  uint64_t seed = 1234;
  bool greedy() const { return top_k == 1; }
};

// ConfigError (naming `where`'s keys) for out-of-range values or top-k together with top-p.
void validate(const SamplingParams& params, const char* where);

// In place on one row (probabilities over the real vocabulary); filtered entries become -inf.
void apply_temperature(std::span<float> logits, double temperature);
void top_k_filter(std::span<float> logits, int64_t top_k);
void top_p_filter(std::span<float> logits, double top_p);
// Softmax of a row (filtered -inf entries get 0).
std::vector<double> softmax(std::span<const float> logits);
// log softmax of a row at one index (double accumulation).
double log_softmax_at(std::span<const float> logits, int64_t index);
// The next step's top_p (Megatron's decay and bound).
double next_top_p(double top_p, double decay, double bound);

// Index of the largest logit (the first on ties).
int64_t argmax(std::span<const float> logits);
// The token for one row: greedy, or a filtered draw with `uniform` in [0, 1) (inverse CDF over ids in
// ascending order). `logits` is modified by the filters.
int64_t choose_token(std::span<float> logits, const SamplingParams& params, double top_p, double uniform);

}  // namespace tessera::generate
