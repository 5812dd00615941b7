// The top-k router's forward and backward (moe_router.h), CPU reference.
#include "tessera/ops/moe_router.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "tessera/core/error.h"
#include "tessera/ops/op_checks.h"

namespace tessera::ops {

RouterScore parse_router_score(const std::string& name) {
  if (name == "softmax") return RouterScore::softmax;
  if (name == "sigmoid") return RouterScore::sigmoid;
  TESSERA_CONFIG_FAIL("model.moe_router_score_function = '", name, "': allowed values are softmax, sigmoid");
}

std::vector<int64_t> Routing::routed_per_expert() const {
  std::vector<int64_t> count(static_cast<size_t>(num_experts), 0);
  for (int32_t e : experts) ++count[static_cast<size_t>(e)];
  return count;
}

std::vector<int64_t> Routing::kept_per_expert() const {
  std::vector<int64_t> count(static_cast<size_t>(num_experts), 0);
  for (size_t i = 0; i < experts.size(); ++i)
    if (kept[i]) ++count[static_cast<size_t>(experts[i])];
  return count;
}

namespace {
// [T, E] f32 host logits; returns {T, E}.
std::pair<int64_t, int64_t> check_logits(const char* op, const Tensor& logits) {
  detail::require_defined(op, logits, "logits");
  detail::require_cpu(op, {&logits});
  detail::require_dtype(op, logits, DType::f32, "logits");
  if (logits.ndim() != 2) TESSERA_FAIL(op, ": logits must be [tokens, experts], got ", logits.describe());
  return {logits.dim(0), logits.dim(1)};
}

void softmax_row(const float* in, int64_t n, float* out) {
  float max = in[0];
  for (int64_t i = 1; i < n; ++i) max = std::max(max, in[i]);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(in[i] - max));
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(std::exp(static_cast<double>(in[i] - max)) / sum);
}

float sigmoid(float x) { return static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(x)))); }

// The scores top-k ranks (softmax post: the logits themselves).
void selection_scores(const float* logits, int64_t e, const RouterOptions& o, float* scores) {
  if (o.score == RouterScore::sigmoid) {
    for (int64_t i = 0; i < e; ++i) scores[i] = sigmoid(logits[i]);
  } else if (o.pre_softmax) {
    softmax_row(logits, e, scores);
  } else {
    std::copy(logits, logits + e, scores);
  }
}
}  // namespace

Routing moe_router_forward(const Tensor& logits, const RouterOptions& o) {
  const char* op = "moe_router_forward";
  const auto [t, e] = check_logits(op, logits);
  if (o.topk < 1 || o.topk > e) TESSERA_FAIL(op, ": topk = ", o.topk, " outside [1, experts = ", e, "]");
  Routing r;
  r.tokens = t;
  r.topk = o.topk;
  r.num_experts = e;
  const auto k = static_cast<size_t>(o.topk);
  r.experts.resize(static_cast<size_t>(t) * k);
  r.probs.resize(r.experts.size());
  r.kept.assign(r.experts.size(), 1);
  std::vector<float> scores(static_cast<size_t>(e));
  std::vector<int32_t> order(static_cast<size_t>(e));
  const float* l = logits.data_as<float>();
  for (int64_t row = 0; row < t; ++row) {
    const float* lr = l + row * e;
    selection_scores(lr, e, o, scores.data());
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                      [&](int32_t a, int32_t b) { return scores[a] > scores[b] || (scores[a] == scores[b] && a < b); });
    int32_t* chosen = r.experts.data() + row * o.topk;
    float* p = r.probs.data() + row * o.topk;
    std::copy(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), chosen);
    if (o.score == RouterScore::softmax && !o.pre_softmax) {
      std::vector<float> top(k);
      for (size_t j = 0; j < k; ++j) top[j] = lr[chosen[j]];
      softmax_row(top.data(), o.topk, p);
    } else {
      double sum = 0;
      for (size_t j = 0; j < k; ++j) sum += p[j] = scores[static_cast<size_t>(chosen[j])];
      if (o.score == RouterScore::sigmoid && o.topk > 1)
        for (size_t j = 0; j < k; ++j) p[j] = static_cast<float>(p[j] / sum);
    }
  }
  return r;
}

void moe_router_backward(const Tensor& logits, const Routing& r, const RouterOptions& o, std::span<const float> dprobs,
                         const Tensor& dlogits) {
  const char* op = "moe_router_backward";
  const auto [t, e] = check_logits(op, logits);
  detail::require_same_shape(op, logits, "logits", dlogits, "dlogits");
  detail::require_dtype(op, dlogits, DType::f32, "dlogits");
  if (r.tokens != t || r.num_experts != e || r.topk != o.topk || dprobs.size() != r.experts.size())
    TESSERA_FAIL(op, ": routing of ", r.tokens, " tokens x ", r.topk, " over ", r.num_experts, " experts and ",
                 dprobs.size(), " probability gradients do not match logits ", logits.describe());
  const int64_t k = o.topk;
  const float* l = logits.data_as<float>();
  float* dl = dlogits.data_as<float>();
  std::fill(dl, dl + t * e, 0.0f);
  std::vector<double> dp(static_cast<size_t>(k));
  std::vector<float> scores(static_cast<size_t>(e));
  for (int64_t row = 0; row < t; ++row) {
    const float* lr = l + row * e;
    float* dr = dl + row * e;
    const int32_t* chosen = r.experts.data() + row * k;
    for (int64_t j = 0; j < k; ++j) {
      const size_t slot = static_cast<size_t>(row * k + j);
      dp[static_cast<size_t>(j)] = r.kept[slot] ? dprobs[slot] : 0.0;
    }
    if (o.score == RouterScore::softmax && !o.pre_softmax) {
      // p = softmax(top logits): dl_j = p_j (dp_j - sum_i p_i dp_i); the probs of dropped slots
      // were zeroed, so recompute p from the logits.
      std::vector<float> top(static_cast<size_t>(k)), p(static_cast<size_t>(k));
      for (int64_t j = 0; j < k; ++j) top[static_cast<size_t>(j)] = lr[chosen[j]];
      softmax_row(top.data(), k, p.data());
      double dot = 0;
      for (int64_t j = 0; j < k; ++j) dot += p[static_cast<size_t>(j)] * dp[static_cast<size_t>(j)];
      for (int64_t j = 0; j < k; ++j)
        dr[chosen[j]] += static_cast<float>(p[static_cast<size_t>(j)] * (dp[static_cast<size_t>(j)] - dot));
    } else if (o.score == RouterScore::softmax) {
      // probs_j = s[e_j], s = softmax(all): ds nonzero at the chosen experts; dl = s (ds - s.ds).
      softmax_row(lr, e, scores.data());
      double dot = 0;
      for (int64_t j = 0; j < k; ++j) dot += scores[static_cast<size_t>(chosen[j])] * dp[static_cast<size_t>(j)];
      for (int64_t i = 0; i < e; ++i) dr[i] = static_cast<float>(-scores[static_cast<size_t>(i)] * dot);
      for (int64_t j = 0; j < k; ++j)
        dr[chosen[j]] += static_cast<float>(scores[static_cast<size_t>(chosen[j])] * dp[static_cast<size_t>(j)]);
    } else {
      // sigmoid: p_j = sig_j / S (k > 1), S = sum of the chosen sig; dsig_j = (dp_j - sum_i dp_i p_i) / S.
      std::vector<double> sig(static_cast<size_t>(k)), dsig(static_cast<size_t>(k));
      double sum = 0;
      for (int64_t j = 0; j < k; ++j) sum += sig[static_cast<size_t>(j)] = sigmoid(lr[chosen[j]]);
      if (k == 1) {
        dsig[0] = dp[0];
      } else {
        double dot = 0;
        for (int64_t j = 0; j < k; ++j) dot += dp[static_cast<size_t>(j)] * sig[static_cast<size_t>(j)] / sum;
        for (int64_t j = 0; j < k; ++j) dsig[static_cast<size_t>(j)] = (dp[static_cast<size_t>(j)] - dot) / sum;
      }
      for (int64_t j = 0; j < k; ++j) {
        const double s = sig[static_cast<size_t>(j)];
        dr[chosen[j]] += static_cast<float>(dsig[static_cast<size_t>(j)] * s * (1 - s));
      }
    }
  }
}

}  // namespace tessera::ops
