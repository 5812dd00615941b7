#include "tessera/generate/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "tessera/core/error.h"

namespace tessera::generate {

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
}

void validate(const SamplingParams& p, const char* where) {
  if (p.top_k < 0) TESSERA_CONFIG_FAIL(where, ": top_k must be >= 0, got ", p.top_k);
  if (!(p.top_p >= 0.0 && p.top_p <= 1.0)) TESSERA_CONFIG_FAIL(where, ": top_p must be in [0, 1], got ", p.top_p);
  if (p.top_k > 1 && p.top_p > 0.0)
    TESSERA_CONFIG_FAIL(where, ": top_k (", p.top_k, ") and top_p (", p.top_p, ") cannot both be set");
  if (p.top_k == 1 && p.top_p > 0.0)
    TESSERA_CONFIG_FAIL(where, ": top_p (", p.top_p, ") needs top_k = 0 (top_k = 1 is greedy)");
  if (!(p.temperature > 0.0 && p.temperature <= 100.0))
    TESSERA_CONFIG_FAIL(where, ": temperature must be in (0, 100], got ", p.temperature);
  if (!(p.top_p_decay >= 0.0 && p.top_p_decay <= 1.0))
    TESSERA_CONFIG_FAIL(where, ": top_p_decay must be in [0, 1], got ", p.top_p_decay);
  if (!(p.top_p_bound >= 0.0 && p.top_p_bound <= 1.0))
    TESSERA_CONFIG_FAIL(where, ": top_p_bound must be in [0, 1], got ", p.top_p_bound);
  if (p.top_p_bound > 0.0 && p.top_p_bound > p.top_p)
    TESSERA_CONFIG_FAIL(where, ": top_p_bound (", p.top_p_bound, ") must not exceed top_p (", p.top_p, ")");
}

void apply_temperature(std::span<float> logits, double temperature) {
  if (temperature == 1.0) return;
  for (float& v : logits) v = static_cast<float>(v / temperature);
}

void top_k_filter(std::span<float> logits, int64_t top_k) {
  if (top_k <= 0 || top_k >= static_cast<int64_t>(logits.size())) return;
  std::vector<float> sorted(logits.begin(), logits.end());
  std::nth_element(sorted.begin(), sorted.begin() + (top_k - 1), sorted.end(), std::greater<float>());
  const float kth = sorted[static_cast<size_t>(top_k - 1)];
  for (float& v : logits)
    if (v < kth) v = kNegInf;  // Megatron: logits < the k-th largest are removed (ties kept)
}

void top_p_filter(std::span<float> logits, double top_p) {
  if (top_p <= 0.0) return;
  std::vector<int64_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
  std::vector<float> sorted(order.size());
  for (size_t i = 0; i < order.size(); ++i) sorted[i] = logits[order[i]];
  const std::vector<double> probs = softmax(sorted);
  // filter_[i] = cumsum[i] > top_p, shifted right by one (the first token always stays).
  double cumulative = 0;
  std::vector<bool> drop(order.size(), false);
  for (size_t i = 0; i < order.size(); ++i) {
    if (i > 0) drop[i] = cumulative > top_p;
    cumulative += probs[i];
  }
  for (size_t i = 0; i < order.size(); ++i)
    if (drop[i]) logits[order[i]] = kNegInf;
}

std::vector<double> softmax(std::span<const float> logits) {
  double max_value = -std::numeric_limits<double>::infinity();
  for (float v : logits) max_value = std::max(max_value, static_cast<double>(v));
  std::vector<double> p(logits.size(), 0.0);
  if (max_value == -std::numeric_limits<double>::infinity()) return p;
  double sum = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    p[i] = logits[i] == kNegInf ? 0.0 : std::exp(static_cast<double>(logits[i]) - max_value);
    sum += p[i];
  }
  for (double& v : p) v /= sum;
  return p;
}

double log_softmax_at(std::span<const float> logits, int64_t index) {
  double max_value = -std::numeric_limits<double>::infinity();
  for (float v : logits) max_value = std::max(max_value, static_cast<double>(v));
  double sum = 0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - max_value);
  return static_cast<double>(logits[static_cast<size_t>(index)]) - max_value - std::log(sum);
}

double next_top_p(double top_p, double decay, double bound) {
  if (top_p > 0.0 && decay > 0.0) {
    top_p *= decay;
    if (bound > 0.0) top_p = std::max(top_p, bound);
  }
  return top_p;
}

int64_t argmax(std::span<const float> logits) {
  return std::max_element(logits.begin(), logits.end()) - logits.begin();
}

int64_t choose_token(std::span<float> logits, const SamplingParams& params, double top_p, double uniform) {
  if (params.greedy()) return argmax(logits);
  apply_temperature(logits, params.temperature);
  if (params.top_k > 1) top_k_filter(logits, params.top_k);
  else if (top_p > 0.0) top_p_filter(logits, top_p);
  const std::vector<double> probs = softmax(logits);
  double cumulative = 0;
  int64_t last_kept = 0;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] <= 0) continue;
    last_kept = static_cast<int64_t>(i);
    cumulative += probs[i];
    if (uniform < cumulative) return last_kept;
  }
  return last_kept;  // rounding left uniform above the total: the last kept token
}

}  // namespace tessera::generate
