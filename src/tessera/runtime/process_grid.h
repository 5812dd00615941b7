// ProcessGrid: the world split into Megatron's parallel groups, order tp-cp-ep-dp-pp (TP fastest),
// plus the expert grid (expert TP, EP, expert DP, PP), pipeline neighbours and the embedding group.
#pragma once
#include <string>
#include <vector>

namespace tessera {

// The [parallel] sizes. data_parallel_size is derived: world / (tp * cp * pp).
// expert_tensor_parallel_size = 0 means "same as tensor_model_parallel_size" (Megatron's default).
struct ParallelSizes {
  int tensor_model_parallel_size = 1;
  int context_parallel_size = 1;
  int expert_model_parallel_size = 1;
  int expert_tensor_parallel_size = 0;
  int pipeline_model_parallel_size = 1;
};

// Every kind of group ProcessGrid knows. Dense groups come from the generator (tp, cp, ep=1, dp, pp);
// expert groups from the generator (etp, cp=1, ep, edp, pp). Names follow Megatron's parallel_state.
enum class GroupKind {
  tensor,                  // tp
  context,                 // cp
  data,                    // dp
  data_context,            // dp-cp (gradient reduction with context parallelism)
  pipeline,                // pp
  model,                   // tp-pp
  tensor_data,             // tp-dp-cp
  embedding,               // first and last stage of each pipeline group ([first] if pp = 1)
  position_embedding,      // first stage of each pipeline group
  expert_tensor,           // expert generator tp (ETP)
  expert_model,            // expert generator ep (EP)
  expert_tensor_model,     // expert generator tp-ep
  expert_tensor_model_pipeline,  // expert generator tp-ep-pp
  expert_data,             // expert generator dp (expert DP)
  world,
};
std::string group_kind_name(GroupKind kind);  // "tensor", "expert_data", ...
std::vector<GroupKind> all_group_kinds();

// Megatron's generate_masked_orthogonal_rank_groups: sizes in order (leftmost fastest), mask selects
// the axes that vary inside a group. Groups are listed in the order Megatron lists them.
std::vector<std::vector<int>> orthogonal_rank_groups(int world_size, const std::vector<int>& sizes,
                                                     const std::vector<bool>& mask);

class ProcessGrid {
 public:
  // Throws ConfigError (naming the [parallel] keys and their values) when the sizes do not divide
  // the world or are not positive.
  ProcessGrid(int world_size, int rank, const ParallelSizes& sizes);

  int world_size() const { return world_size_; }
  int rank() const { return rank_; }

  int tensor_size() const { return tp_; }
  int context_size() const { return cp_; }
  int data_size() const { return dp_; }
  int pipeline_size() const { return pp_; }
  int expert_tensor_size() const { return etp_; }
  int expert_model_size() const { return ep_; }
  int expert_data_size() const { return edp_; }

  // This rank's coordinates on both grids.
  int tensor_rank() const { return tp_rank_; }
  int context_rank() const { return cp_rank_; }
  int data_rank() const { return dp_rank_; }
  int pipeline_rank() const { return pp_rank_; }
  int expert_tensor_rank() const { return etp_rank_; }
  int expert_model_rank() const { return ep_rank_; }
  int expert_data_rank() const { return edp_rank_; }

  // Every group of a kind (a partition of the world, except the embedding groups, which only
  // contain the first/last stages), and the group this rank is in (empty if it is in none).
  const std::vector<std::vector<int>>& groups(GroupKind kind) const;
  const std::vector<int>& group(GroupKind kind) const;
  bool in_group(GroupKind kind) const { return !group(kind).empty(); }
  int rank_in_group(GroupKind kind) const;  // -1 if not a member

  bool is_first_stage() const { return pp_rank_ == 0; }
  bool is_last_stage() const { return pp_rank_ == pp_ - 1; }
  int pipeline_prev() const;  // world rank of the previous stage (wraps around, as Megatron)
  int pipeline_next() const;  // world rank of the next stage (wraps around)

  std::string describe() const;  // one line: sizes and this rank's coordinates

 private:
  int world_size_, rank_;
  int tp_, cp_, dp_, pp_, etp_, ep_, edp_;
  int tp_rank_ = 0, cp_rank_ = 0, dp_rank_ = 0, pp_rank_ = 0;
  int etp_rank_ = 0, ep_rank_ = 0, edp_rank_ = 0;
  std::vector<std::vector<std::vector<int>>> groups_;  // indexed by GroupKind
  std::vector<std::vector<int>> mine_;                 // indexed by GroupKind
};

}  // namespace tessera
