#include "tessera/nn/relative_position_bias.h"

#include "tessera/core/error.h"
#include "tessera/ops/elementwise.h"
#include "tessera/ops/relative_position_bias.h"

namespace tessera::nn {

RelativePositionBias::RelativePositionBias(ParameterStore& store, const std::string& name, int64_t num_buckets,
                                           int64_t max_distance, int64_t num_heads, bool bidirectional,
                                           double init_std, const parallel::TensorParallel& tp)
    : store_(&store), num_buckets_(num_buckets), max_distance_(max_distance), bidirectional_(bidirectional) {
  if (num_buckets < 2 || (bidirectional && num_buckets < 4))
    TESSERA_CONFIG_FAIL("model.relative_attention_num_buckets = ", num_buckets,
                        " is too small (at least 4: half the buckets for each direction, half of those exact)");
  if (max_distance < 1)
    TESSERA_CONFIG_FAIL("model.relative_attention_max_distance = ", max_distance, " must be positive");
  TESSERA_CHECK(num_heads % tp.size == 0, name, ": ", num_heads, " heads do not split over TP = ", tp.size);
  local_heads_ = num_heads / tp.size;
  weight_ = store.add(name + ".weight", {num_buckets, local_heads_}, Init::normal, init_std, true,
                      Sharding::split(1, num_heads, tp.size, tp.rank));
}

Tensor RelativePositionBias::forward(Arena& arena, int64_t sq, int64_t sk, int64_t query_offset, Saved& saved) const {
  std::vector<int32_t> host =
      ops::relative_position_buckets(sq, sk, query_offset, bidirectional_, num_buckets_, max_distance_);
  saved.buckets = arena.allocate(DType::i32, {sq, sk});
  ops::copy(Tensor(host.data(), DType::i32, {sq, sk}, Device::cpu()), saved.buckets);
  const Tensor& weight = store_->value(weight_);
  Tensor bias = arena.allocate(weight.dtype(), {local_heads_, sq, sk});
  ops::relative_position_bias_forward(weight, saved.buckets, bias);
  return bias;
}

void RelativePositionBias::backward(Arena&, const Tensor& dbias, const Saved& saved) const {
  ops::relative_position_bias_backward(dbias, saved.buckets, store_->grad(weight_));
}

}  // namespace tessera::nn
