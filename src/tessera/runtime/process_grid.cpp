#include "tessera/runtime/process_grid.h"

#include <algorithm>
#include <sstream>

#include "tessera/core/error.h"

namespace tessera {

namespace {
constexpr int kKinds = static_cast<int>(GroupKind::world) + 1;

std::vector<int> prefix_product(const std::vector<int>& a) {
  std::vector<int> r{1};
  for (int v : a) r.push_back(r.back() * v);
  return r;
}

// index = sum idx[i] * stride[i] with idx[i] < shape[i] (strides = prefix products of shape).
std::vector<int> decompose(int index, const std::vector<int>& shape) {
  std::vector<int> stride = prefix_product(shape), idx(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) idx[i] = (index / stride[i]) % shape[i];
  return idx;
}

int inner_product(const std::vector<int>& a, const std::vector<int>& b) {
  int s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}
}  // namespace

std::string group_kind_name(GroupKind kind) {
  switch (kind) {
    case GroupKind::tensor: return "tensor";
    case GroupKind::context: return "context";
    case GroupKind::data: return "data";
    case GroupKind::data_context: return "data_context";
    case GroupKind::pipeline: return "pipeline";
    case GroupKind::model: return "model";
    case GroupKind::tensor_data: return "tensor_data";
    case GroupKind::embedding: return "embedding";
    case GroupKind::position_embedding: return "position_embedding";
    case GroupKind::expert_tensor: return "expert_tensor";
    case GroupKind::expert_model: return "expert_model";
    case GroupKind::expert_tensor_model: return "expert_tensor_model";
    case GroupKind::expert_tensor_model_pipeline: return "expert_tensor_model_pipeline";
    case GroupKind::expert_data: return "expert_data";
    case GroupKind::world: return "world";
  }
  return "unknown";
}

std::vector<GroupKind> all_group_kinds() {
  std::vector<GroupKind> kinds;
  for (int k = 0; k < kKinds; ++k) kinds.push_back(static_cast<GroupKind>(k));
  return kinds;
}

std::vector<std::vector<int>> orthogonal_rank_groups(int world_size, const std::vector<int>& sizes,
                                                     const std::vector<bool>& mask) {
  TESSERA_CHECK(sizes.size() == mask.size(), "sizes and mask differ in length");
  std::vector<int> global_stride = prefix_product(sizes);
  std::vector<int> masked_shape, unmasked_shape, masked_stride, unmasked_stride;
  for (size_t i = 0; i < sizes.size(); ++i) {
    (mask[i] ? masked_shape : unmasked_shape).push_back(sizes[i]);
    (mask[i] ? masked_stride : unmasked_stride).push_back(global_stride[i]);
  }
  int group_size = prefix_product(masked_shape).back();
  TESSERA_CHECK(global_stride.back() == world_size, "sizes multiply to ", global_stride.back(),
                ", not the world size ", world_size);
  int num_groups = world_size / group_size;
  std::vector<std::vector<int>> groups;
  for (int g = 0; g < num_groups; ++g) {
    int base = inner_product(decompose(g, unmasked_shape), unmasked_stride);
    std::vector<int> ranks;
    for (int r = 0; r < group_size; ++r) ranks.push_back(base + inner_product(decompose(r, masked_shape), masked_stride));
    groups.push_back(std::move(ranks));
  }
  return groups;
}

ProcessGrid::ProcessGrid(int world_size, int rank, const ParallelSizes& sizes)
    : world_size_(world_size),
      rank_(rank),
      tp_(sizes.tensor_model_parallel_size),
      cp_(sizes.context_parallel_size),
      pp_(sizes.pipeline_model_parallel_size),
      etp_(sizes.expert_tensor_parallel_size == 0 ? sizes.tensor_model_parallel_size
                                                  : sizes.expert_tensor_parallel_size),
      ep_(sizes.expert_model_parallel_size) {
  auto sizes_text = [&] {
    return detail::concat("parallel.tensor_model_parallel_size = ", tp_, ", parallel.context_parallel_size = ", cp_,
                          ", parallel.pipeline_model_parallel_size = ", pp_,
                          ", parallel.expert_model_parallel_size = ", ep_,
                          ", parallel.expert_tensor_parallel_size = ", etp_);
  };
  TESSERA_CHECK(world_size > 0 && rank >= 0 && rank < world_size, "rank ", rank, " outside world of ", world_size);
  if (tp_ < 1 || cp_ < 1 || pp_ < 1 || ep_ < 1 || etp_ < 1)
    TESSERA_CONFIG_FAIL("parallel sizes must be positive integers; got ", sizes_text());
  if (world_size % (tp_ * cp_ * pp_) != 0)
    TESSERA_CONFIG_FAIL("the world size ", world_size, " is not divisible by tensor x context x pipeline = ", tp_, " x ",
                        cp_, " x ", pp_, " = ", tp_ * cp_ * pp_, " (", sizes_text(),
                        "); choose sizes whose product divides the number of ranks");
  if (world_size % (etp_ * ep_ * pp_) != 0)
    TESSERA_CONFIG_FAIL("the world size ", world_size,
                        " is not divisible by expert tensor x expert model x pipeline = ", etp_, " x ", ep_, " x ",
                        pp_, " = ", etp_ * ep_ * pp_, " (", sizes_text(),
                        "); choose sizes whose product divides the number of ranks");
  dp_ = world_size / (tp_ * cp_ * pp_);
  edp_ = world_size / (etp_ * ep_ * pp_);

  // Coordinates: rank = tp_r + tp*(cp_r + cp*(dp_r + dp*pp_r)) and, on the expert grid,
  // rank = etp_r + etp*(ep_r + ep*(edp_r + edp*pp_r)).
  std::vector<int> dense = decompose(rank, {tp_, cp_, 1, dp_, pp_});
  tp_rank_ = dense[0], cp_rank_ = dense[1], dp_rank_ = dense[3], pp_rank_ = dense[4];
  std::vector<int> expert = decompose(rank, {etp_, 1, ep_, edp_, pp_});
  etp_rank_ = expert[0], ep_rank_ = expert[2], edp_rank_ = expert[3];

  groups_.resize(kKinds);
  const std::vector<int> dense_sizes{tp_, cp_, 1, dp_, pp_};
  const std::vector<int> expert_sizes{etp_, 1, ep_, edp_, pp_};
  auto set = [&](GroupKind kind, const std::vector<int>& s, std::vector<bool> mask) {
    groups_[static_cast<int>(kind)] = orthogonal_rank_groups(world_size, s, mask);
  };
  //                                       tp     cp     ep     dp     pp
  set(GroupKind::tensor, dense_sizes, {true, false, false, false, false});
  set(GroupKind::context, dense_sizes, {false, true, false, false, false});
  set(GroupKind::data, dense_sizes, {false, false, false, true, false});
  set(GroupKind::data_context, dense_sizes, {false, true, false, true, false});
  set(GroupKind::pipeline, dense_sizes, {false, false, false, false, true});
  set(GroupKind::model, dense_sizes, {true, false, false, false, true});
  set(GroupKind::tensor_data, dense_sizes, {true, true, false, true, false});
  set(GroupKind::expert_tensor, expert_sizes, {true, false, false, false, false});
  set(GroupKind::expert_model, expert_sizes, {false, false, true, false, false});
  set(GroupKind::expert_tensor_model, expert_sizes, {true, false, true, false, false});
  set(GroupKind::expert_tensor_model_pipeline, expert_sizes, {true, false, true, false, true});
  set(GroupKind::expert_data, expert_sizes, {false, false, false, true, false});
  set(GroupKind::world, dense_sizes, {true, true, true, true, true});
  TESSERA_CHECK(groups(GroupKind::pipeline) == orthogonal_rank_groups(world_size, expert_sizes,
                                                                      {false, false, false, false, true}),
                "dense and expert pipeline groups differ");
  for (const auto& pipeline : groups(GroupKind::pipeline)) {
    if (pipeline.size() == 1) groups_[static_cast<int>(GroupKind::embedding)].push_back({pipeline.front()});
    else groups_[static_cast<int>(GroupKind::embedding)].push_back({pipeline.front(), pipeline.back()});
    groups_[static_cast<int>(GroupKind::position_embedding)].push_back({pipeline.front()});
  }

  mine_.resize(kKinds);
  for (int k = 0; k < kKinds; ++k)
    for (const auto& g : groups_[k])
      if (std::find(g.begin(), g.end(), rank) != g.end()) mine_[k] = g;
}

const std::vector<std::vector<int>>& ProcessGrid::groups(GroupKind kind) const {
  return groups_.at(static_cast<int>(kind));
}

const std::vector<int>& ProcessGrid::group(GroupKind kind) const { return mine_.at(static_cast<int>(kind)); }

int ProcessGrid::rank_in_group(GroupKind kind) const {
  const auto& g = group(kind);
  auto it = std::find(g.begin(), g.end(), rank_);
  return it == g.end() ? -1 : static_cast<int>(it - g.begin());
}

int ProcessGrid::pipeline_prev() const {
  const auto& g = group(GroupKind::pipeline);
  return g[(pp_rank_ - 1 + pp_) % pp_];
}

int ProcessGrid::pipeline_next() const {
  const auto& g = group(GroupKind::pipeline);
  return g[(pp_rank_ + 1) % pp_];
}

std::string ProcessGrid::describe() const {
  std::ostringstream out;
  out << "world " << world_size_ << " = tp " << tp_ << " x cp " << cp_ << " x dp " << dp_ << " x pp " << pp_
      << " (experts: etp " << etp_ << " x ep " << ep_ << " x edp " << edp_ << " x pp " << pp_ << "); rank "
      << rank_ << " at tp " << tp_rank_ << " cp " << cp_rank_ << " dp " << dp_rank_ << " pp " << pp_rank_ << " etp "
      << etp_rank_ << " ep " << ep_rank_ << " edp " << edp_rank_;
  return out.str();
}

}  // namespace tessera
