// Load-balancing and z-loss forward / backward (moe_aux_loss.h), CPU reference.
#include "tessera/ops/moe_aux_loss.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/ops/op_checks.h"

namespace tessera::ops {

namespace {
std::pair<int64_t, int64_t> check(const char* op, const Tensor& logits, const Tensor* dlogits) {
  detail::require_defined(op, logits, "logits");
  detail::require_cpu(op, {&logits});
  detail::require_dtype(op, logits, DType::f32, "logits");
  if (logits.ndim() != 2) TESSERA_FAIL(op, ": logits must be [tokens, experts], got ", logits.describe());
  if (dlogits) {
    detail::require_same_shape(op, logits, "logits", *dlogits, "dlogits");
    detail::require_dtype(op, *dlogits, DType::f32, "dlogits");
  }
  return {logits.dim(0), logits.dim(1)};
}

// The aux loss's per-token scores of one row (softmax, or the row-normalised sigmoid) and, for the
// sigmoid, the sigmoids themselves and their sum (for the backward).
void aux_scores(const float* l, int64_t e, RouterScore score, double* s, double* sig, double& sig_sum) {
  if (score == RouterScore::sigmoid) {
    sig_sum = 0;
    for (int64_t i = 0; i < e; ++i) sig_sum += sig[i] = 1.0 / (1.0 + std::exp(-static_cast<double>(l[i])));
    for (int64_t i = 0; i < e; ++i) s[i] = sig[i] / (sig_sum + 1e-20);
    return;
  }
  const double max = *std::max_element(l, l + e);
  double sum = 0;
  for (int64_t i = 0; i < e; ++i) sum += s[i] = std::exp(static_cast<double>(l[i]) - max);
  for (int64_t i = 0; i < e; ++i) s[i] /= sum;
}

double lse(const float* l, int64_t e) {
  const double max = *std::max_element(l, l + e);
  double sum = 0;
  for (int64_t i = 0; i < e; ++i) sum += std::exp(static_cast<double>(l[i]) - max);
  return max + std::log(sum);
}

double aux_factor(int64_t t, int64_t e, int64_t topk) {
  return static_cast<double>(e) / (static_cast<double>(topk) * static_cast<double>(t) * static_cast<double>(t));
}

void check_counts(const char* op, std::span<const int64_t> counts, int64_t e, int64_t topk) {
  if (static_cast<int64_t>(counts.size()) != e || topk < 1)
    TESSERA_FAIL(op, ": ", counts.size(), " expert counts and topk = ", topk, " for ", e, " experts");
}
}  // namespace

double moe_aux_loss_forward(const Tensor& logits, std::span<const int64_t> counts, int64_t topk, RouterScore score) {
  const char* op = "moe_aux_loss_forward";
  const auto [t, e] = check(op, logits, nullptr);
  check_counts(op, counts, e, topk);
  if (t == 0) return 0.0;
  std::vector<double> s(static_cast<size_t>(e)), sig(static_cast<size_t>(e)), column(static_cast<size_t>(e), 0.0);
  double sig_sum = 0;
  const float* l = logits.data_as<float>();
  for (int64_t row = 0; row < t; ++row) {
    aux_scores(l + row * e, e, score, s.data(), sig.data(), sig_sum);
    for (int64_t i = 0; i < e; ++i) column[static_cast<size_t>(i)] += s[static_cast<size_t>(i)];
  }
  double total = 0;
  for (int64_t i = 0; i < e; ++i) total += column[static_cast<size_t>(i)] * static_cast<double>(counts[static_cast<size_t>(i)]);
  return total * aux_factor(t, e, topk);
}

void moe_aux_loss_backward(const Tensor& logits, std::span<const int64_t> counts, int64_t topk, RouterScore score,
                           double dloss, const Tensor& dlogits) {
  const char* op = "moe_aux_loss_backward";
  const auto [t, e] = check(op, logits, &dlogits);
  check_counts(op, counts, e, topk);
  if (t == 0 || dloss == 0) return;
  // d L / d scores[t, i] = factor * c_i (g_i below), then through the score function.
  const double factor = aux_factor(t, e, topk) * dloss;
  std::vector<double> s(static_cast<size_t>(e)), sig(static_cast<size_t>(e));
  double sig_sum = 0;
  const float* l = logits.data_as<float>();
  float* dl = dlogits.data_as<float>();
  for (int64_t row = 0; row < t; ++row) {
    aux_scores(l + row * e, e, score, s.data(), sig.data(), sig_sum);
    double dot = 0;  // sum_i g_i s_i
    for (int64_t i = 0; i < e; ++i)
      dot += factor * static_cast<double>(counts[static_cast<size_t>(i)]) * s[static_cast<size_t>(i)];
    for (int64_t i = 0; i < e; ++i) {
      const double g = factor * static_cast<double>(counts[static_cast<size_t>(i)]);
      const size_t u = static_cast<size_t>(i);
      double d;
      if (score == RouterScore::sigmoid) {  // s = sig / S: dsig_i = (g_i - sum_j g_j s_j) / S
        const double dsig = (g - dot) / (sig_sum + 1e-20);
        d = dsig * sig[u] * (1 - sig[u]);
      } else {  // softmax: dl_i = s_i (g_i - sum_j g_j s_j)
        d = s[u] * (g - dot);
      }
      dl[row * e + i] += static_cast<float>(d);
    }
  }
}

double moe_z_loss_forward(const Tensor& logits) {
  const auto [t, e] = check("moe_z_loss_forward", logits, nullptr);
  if (t == 0) return 0.0;
  const float* l = logits.data_as<float>();
  double sum = 0;
  for (int64_t row = 0; row < t; ++row) {
    const double z = lse(l + row * e, e);
    sum += z * z;
  }
  return sum / static_cast<double>(t);
}

void moe_z_loss_backward(const Tensor& logits, double dloss, const Tensor& dlogits) {
  const auto [t, e] = check("moe_z_loss_backward", logits, &dlogits);
  if (t == 0 || dloss == 0) return;
  const float* l = logits.data_as<float>();
  float* dl = dlogits.data_as<float>();
  // d/dl_i of z^2 / T = 2 z softmax_i / T
  for (int64_t row = 0; row < t; ++row) {
    const double z = lse(l + row * e, e);
    const double c = dloss * 2.0 * z / static_cast<double>(t);
    for (int64_t i = 0; i < e; ++i)
      dl[row * e + i] += static_cast<float>(c * std::exp(static_cast<double>(l[row * e + i]) - z));
  }
}

}  // namespace tessera::ops
