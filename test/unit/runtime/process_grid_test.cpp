// ProcessGrid against Megatron's rank groups (hand-derived lists in test/mpi/megatron_layouts.h),
// coordinates, pipeline neighbours, and the config errors for sizes that do not divide the world.
#include <gtest/gtest.h>

#include <algorithm>

#include "../../mpi/megatron_layouts.h"
#include "tessera/core/error.h"
#include "tessera/runtime/process_grid.h"

namespace tessera {
namespace {

TEST(ProcessGrid, GroupsEqualMegatronForEveryLayout) {
  for (const auto& layout : testing::megatron_layouts()) {
    for (int rank = 0; rank < layout.world_size; ++rank) {
      ProcessGrid grid(layout.world_size, rank, layout.sizes);
      for (const auto& [kind, expected] : layout.groups) {
        EXPECT_EQ(grid.groups(kind), expected) << layout.name << " " << group_kind_name(kind);
        bool found = false;
        for (const auto& g : expected)
          if (std::find(g.begin(), g.end(), rank) != g.end()) {
            EXPECT_EQ(grid.group(kind), g) << layout.name << " rank " << rank << " " << group_kind_name(kind);
            found = true;
          }
        EXPECT_EQ(found, grid.in_group(kind)) << layout.name << " rank " << rank << " " << group_kind_name(kind);
      }
    }
  }
}

TEST(ProcessGrid, CoordinatesFollowTpCpEpDpPpOrder) {
  // tp2 pp2 dp2: rank 6 = tp 0 + 2 * dp 1 + 4 * pp 1.
  ProcessGrid grid(8, 6, {2, 1, 1, 0, 2});
  EXPECT_EQ(grid.data_size(), 2);
  EXPECT_EQ(grid.tensor_rank(), 0);
  EXPECT_EQ(grid.data_rank(), 1);
  EXPECT_EQ(grid.pipeline_rank(), 1);
  EXPECT_TRUE(grid.is_last_stage());
  EXPECT_FALSE(grid.is_first_stage());
  EXPECT_EQ(grid.pipeline_prev(), 2);
  EXPECT_EQ(grid.pipeline_next(), 2);  // wraps around, as Megatron's next-rank helper
  EXPECT_EQ(grid.rank_in_group(GroupKind::data), 1);
  // Expert grid tp2 pp2 ep2 etp1: rank 7 = ep 1 + 2 * edp 1 + 4 * pp 1.
  ProcessGrid expert(8, 7, {2, 1, 2, 1, 2});
  EXPECT_EQ(expert.expert_tensor_size(), 1);
  EXPECT_EQ(expert.expert_data_size(), 2);
  EXPECT_EQ(expert.expert_model_rank(), 1);
  EXPECT_EQ(expert.expert_data_rank(), 1);
  EXPECT_EQ(expert.pipeline_rank(), 1);
}

TEST(ProcessGrid, FourStagePipelineNeighboursAndEmbedding) {
  ProcessGrid grid(4, 1, {1, 1, 1, 0, 4});
  EXPECT_EQ(grid.pipeline_prev(), 0);
  EXPECT_EQ(grid.pipeline_next(), 2);
  EXPECT_FALSE(grid.in_group(GroupKind::embedding));  // a middle stage holds no embedding
  EXPECT_EQ(grid.rank_in_group(GroupKind::embedding), -1);
  ProcessGrid last(4, 3, {1, 1, 1, 0, 4});
  EXPECT_EQ(last.group(GroupKind::embedding), (std::vector<int>{0, 3}));
  EXPECT_EQ(last.group(GroupKind::position_embedding), std::vector<int>{});
}

TEST(ProcessGrid, SizesNotDividingTheWorldAreConfigErrorsNamingTheKeys) {
  try {
    ProcessGrid grid(8, 0, {3, 1, 1, 0, 1});
    FAIL() << "tp 3 on 8 ranks was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(e.message().find("parallel.tensor_model_parallel_size = 3"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("world size 8"), std::string::npos) << e.message();
  }
  try {
    ProcessGrid grid(8, 0, {2, 1, 1, 0, 3});
    FAIL() << "pp 3 on 8 ranks was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(e.message().find("parallel.pipeline_model_parallel_size = 3"), std::string::npos) << e.message();
  }
  try {
    ProcessGrid grid(8, 0, {2, 1, 3, 0, 1});
    FAIL() << "ep 3 on 8 ranks was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(e.message().find("parallel.expert_model_parallel_size = 3"), std::string::npos) << e.message();
  }
  EXPECT_THROW(ProcessGrid(8, 0, {0, 1, 1, 0, 1}), ConfigError);
}

TEST(ProcessGrid, OrthogonalGroupsMatchMegatronDocstringExample) {
  // generate_masked_orthogonal_rank_groups docstring: sizes [tp 2, dp 3, pp 4], mask dp.
  auto groups = orthogonal_rank_groups(24, {2, 3, 4}, {false, true, false});
  ASSERT_EQ(groups.size(), 8u);
  EXPECT_EQ(groups[0], (std::vector<int>{0, 2, 4}));
  EXPECT_EQ(groups[1], (std::vector<int>{1, 3, 5}));
  EXPECT_EQ(groups[7], (std::vector<int>{19, 21, 23}));
}

}  // namespace
}  // namespace tessera
