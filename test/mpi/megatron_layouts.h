// Expected rank groups for world size 8 (and Megatron's own world-16 example), derived by hand from
// Megatron's RankGenerator (order tp-cp-ep-dp-pp, leftmost fastest; expert grid etp-ep-edp-pp).
#pragma once
#include <map>
#include <string>
#include <vector>

#include "tessera/runtime/process_grid.h"

namespace tessera::testing {

using Groups = std::vector<std::vector<int>>;

struct ExpectedLayout {
  std::string name;
  int world_size;
  ParallelSizes sizes;
  std::map<GroupKind, Groups> groups;
};

inline std::vector<ExpectedLayout> megatron_layouts() {
  using K = GroupKind;
  const Groups singletons8 = {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}};
  std::vector<ExpectedLayout> layouts;

  // tp2 pp2 dp2: rank = tp + 2*dp + 4*pp.
  layouts.push_back({"tp2 pp2 dp2", 8, {2, 1, 1, 0, 2},
                     {{K::tensor, {{0, 1}, {2, 3}, {4, 5}, {6, 7}}},
                      {K::data, {{0, 2}, {1, 3}, {4, 6}, {5, 7}}},
                      {K::context, singletons8},
                      {K::data_context, {{0, 2}, {1, 3}, {4, 6}, {5, 7}}},
                      {K::pipeline, {{0, 4}, {1, 5}, {2, 6}, {3, 7}}},
                      {K::model, {{0, 1, 4, 5}, {2, 3, 6, 7}}},
                      {K::tensor_data, {{0, 1, 2, 3}, {4, 5, 6, 7}}},
                      {K::embedding, {{0, 4}, {1, 5}, {2, 6}, {3, 7}}},
                      {K::position_embedding, {{0}, {1}, {2}, {3}}},
                      {K::expert_tensor, {{0, 1}, {2, 3}, {4, 5}, {6, 7}}},
                      {K::expert_model, singletons8},
                      {K::expert_tensor_model, {{0, 1}, {2, 3}, {4, 5}, {6, 7}}},
                      {K::expert_tensor_model_pipeline, {{0, 1, 4, 5}, {2, 3, 6, 7}}},
                      {K::expert_data, {{0, 2}, {1, 3}, {4, 6}, {5, 7}}}}});

  // tp2 ep2 (dense dp4): dense rank = tp + 2*dp; expert (etp = tp = 2, ep 2, edp 2): etp + 2*ep + 4*edp.
  layouts.push_back({"tp2 ep2 dp4", 8, {2, 1, 2, 0, 1},
                     {{K::tensor, {{0, 1}, {2, 3}, {4, 5}, {6, 7}}},
                      {K::data, {{0, 2, 4, 6}, {1, 3, 5, 7}}},
                      {K::pipeline, singletons8},
                      {K::model, {{0, 1}, {2, 3}, {4, 5}, {6, 7}}},
                      {K::tensor_data, {{0, 1, 2, 3, 4, 5, 6, 7}}},
                      {K::embedding, singletons8},
                      {K::expert_tensor, {{0, 1}, {2, 3}, {4, 5}, {6, 7}}},
                      {K::expert_model, {{0, 2}, {1, 3}, {4, 6}, {5, 7}}},
                      {K::expert_tensor_model, {{0, 1, 2, 3}, {4, 5, 6, 7}}},
                      {K::expert_tensor_model_pipeline, {{0, 1, 2, 3}, {4, 5, 6, 7}}},
                      {K::expert_data, {{0, 4}, {1, 5}, {2, 6}, {3, 7}}}}});

  // tp4 pp2 (dp1): rank = tp + 4*pp.
  layouts.push_back({"tp4 pp2", 8, {4, 1, 1, 0, 2},
                     {{K::tensor, {{0, 1, 2, 3}, {4, 5, 6, 7}}},
                      {K::data, singletons8},
                      {K::pipeline, {{0, 4}, {1, 5}, {2, 6}, {3, 7}}},
                      {K::model, {{0, 1, 2, 3, 4, 5, 6, 7}}},
                      {K::tensor_data, {{0, 1, 2, 3}, {4, 5, 6, 7}}},
                      {K::embedding, {{0, 4}, {1, 5}, {2, 6}, {3, 7}}},
                      {K::position_embedding, {{0}, {1}, {2}, {3}}},
                      {K::expert_tensor, {{0, 1, 2, 3}, {4, 5, 6, 7}}},
                      {K::expert_model, singletons8},
                      {K::expert_data, singletons8}}});

  // Expert grid with its own expert TP: tp2 pp2 (dense dp2), ep2, etp1 (edp 2):
  // expert rank = ep + 2*edp + 4*pp.
  layouts.push_back({"tp2 pp2 ep2 etp1", 8, {2, 1, 2, 1, 2},
                     {{K::tensor, {{0, 1}, {2, 3}, {4, 5}, {6, 7}}},
                      {K::data, {{0, 2}, {1, 3}, {4, 6}, {5, 7}}},
                      {K::pipeline, {{0, 4}, {1, 5}, {2, 6}, {3, 7}}},
                      {K::expert_tensor, singletons8},
                      {K::expert_model, {{0, 1}, {2, 3}, {4, 5}, {6, 7}}},
                      {K::expert_tensor_model, {{0, 1}, {2, 3}, {4, 5}, {6, 7}}},
                      {K::expert_tensor_model_pipeline, {{0, 1, 4, 5}, {2, 3, 6, 7}}},
                      {K::expert_data, {{0, 2}, {1, 3}, {4, 6}, {5, 7}}}}});

  // Expert grid on a flat dense layout: tp2 (dp4), ep4, etp1 (edp 2): expert rank = ep + 4*edp.
  layouts.push_back({"tp2 dp4 ep4 etp1", 8, {2, 1, 4, 1, 1},
                     {{K::tensor, {{0, 1}, {2, 3}, {4, 5}, {6, 7}}},
                      {K::data, {{0, 2, 4, 6}, {1, 3, 5, 7}}},
                      {K::expert_tensor, singletons8},
                      {K::expert_model, {{0, 1, 2, 3}, {4, 5, 6, 7}}},
                      {K::expert_tensor_model, {{0, 1, 2, 3}, {4, 5, 6, 7}}},
                      {K::expert_data, {{0, 4}, {1, 5}, {2, 6}, {3, 7}}}}});

  // Megatron's documented example (parallel_state.md / spec §3): world 16, tp2 pp2 dp4.
  layouts.push_back({"world16 tp2 pp2 dp4", 16, {2, 1, 1, 0, 2},
                     {{K::tensor, {{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}},
                      {K::data, {{0, 2, 4, 6}, {1, 3, 5, 7}, {8, 10, 12, 14}, {9, 11, 13, 15}}},
                      {K::pipeline, {{0, 8}, {1, 9}, {2, 10}, {3, 11}, {4, 12}, {5, 13}, {6, 14}, {7, 15}}},
                      {K::embedding, {{0, 8}, {1, 9}, {2, 10}, {3, 11}, {4, 12}, {5, 13}, {6, 14}, {7, 15}}}}});
  return layouts;
}

}  // namespace tessera::testing
