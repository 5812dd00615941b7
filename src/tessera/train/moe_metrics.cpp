#include "tessera/train/moe_metrics.h"

#include <cmath>

#include "tessera/core/buffer.h"

namespace tessera::train {

namespace {
// values summed over `group` (f32 pairs: high part and remainder, as sum_over_data_parallel).
void sum_over(Communicator& group, std::vector<double>& values) {
  if (group.size() == 1 || values.empty()) return;
  Buffer buffer(2 * values.size() * sizeof(float), Device::cpu());
  Tensor parts = buffer.as_tensor(DType::f32, {static_cast<int64_t>(2 * values.size())});
  float* v = parts.data_as<float>();
  for (size_t i = 0; i < values.size(); ++i) {
    v[2 * i] = static_cast<float>(values[i]);
    v[2 * i + 1] = std::isfinite(values[i]) ? static_cast<float>(values[i] - static_cast<double>(v[2 * i])) : 0.0f;
  }
  group.all_reduce(parts, ReduceOp::sum);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>(v[2 * i]) + static_cast<double>(v[2 * i + 1]);
}
}  // namespace

MoeStepMetrics reduce_moe_stats(const models::MoeStepStats& stats, const models::TransformerConfig& model,
                                parallel::ParallelContext& context, double denominator) {
  const auto layers = static_cast<size_t>(model.num_layers), experts = static_cast<size_t>(model.num_experts);
  const size_t width = 3 + experts;
  std::vector<double> flat(layers * width, 0.0);
  if (!stats.aux_loss.empty()) {
    for (size_t l = 0; l < layers; ++l) {
      flat[l * width] = stats.aux_loss.at(l);
      flat[l * width + 1] = stats.z_loss.at(l);
      flat[l * width + 2] = stats.dropped.at(l);
      for (size_t e = 0; e < experts; ++e) flat[l * width + 3 + e] = stats.routed.at(l).at(e);
    }
  }
  sum_over(context.pipeline(), flat);  // each layer lives on one stage
  sum_over(context.data(), flat);
  MoeStepMetrics out;
  double aux = 0, z = 0;
  int64_t moe_layers = 0;
  for (size_t l = 0; l < layers; ++l) {
    if (!model.is_moe_layer(static_cast<int64_t>(l))) continue;
    ++moe_layers;
    aux += flat[l * width];
    z += flat[l * width + 1];
    MoeLayerLoad load{static_cast<int64_t>(l), std::vector<double>(experts, 0.0), flat[l * width + 2]};
    double routed = 0;
    for (size_t e = 0; e < experts; ++e) routed += flat[l * width + 3 + e];
    for (size_t e = 0; e < experts; ++e) load.expert_share[e] = routed > 0 ? flat[l * width + 3 + e] / routed : 0.0;
    out.load.push_back(std::move(load));
  }
  const double scale = moe_layers > 0 && denominator > 0 ? 1.0 / (denominator * static_cast<double>(moe_layers)) : 0.0;
  out.losses = {{"moe_aux_loss", aux * scale}, {"moe_z_loss", z * scale}};
  return out;
}

}  // namespace tessera::train
