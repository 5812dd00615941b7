#include "tessera/pipeline/pipeline_layout.h"

#include <numeric>
#include <sstream>

#include "tessera/core/error.h"

namespace tessera::parallel {

std::vector<int64_t> parse_pipeline_layer_split(const std::string& text) {
  std::vector<int64_t> split;
  if (text.empty()) return split;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t used = 0;
    int64_t layers = -1;
    try {
      layers = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    while (used < item.size() && item[used] == ' ') ++used;
    if (used == 0 || used != item.size() || layers < 0)
      TESSERA_CONFIG_FAIL("parallel.pipeline_layer_split = \"", text, "\": '", item,
                          "' is not a layer count; expected comma-separated non-negative integers, one per pipeline "
                          "stage, e.g. \"3,3,2\"");
    split.push_back(layers);
  }
  return split;
}

int pipeline_num_chunks(int64_t num_layers, const ParallelConfig& p) {
  const int64_t n = p.num_layers_per_virtual_pipeline_stage, L = num_layers;
  const int64_t pp = p.pipeline_model_parallel_size;
  if (n <= 0) return 1;
  if (pp < 2)
    TESSERA_CONFIG_FAIL("parallel.num_layers_per_virtual_pipeline_stage = ", n,
                        " (the interleaved schedule) needs parallel.pipeline_model_parallel_size > 1, got ", pp);
  if (!p.pipeline_layer_split.empty())
    TESSERA_CONFIG_FAIL("parallel.pipeline_layer_split and parallel.num_layers_per_virtual_pipeline_stage > 0 cannot "
                        "be combined; set one of them");
  if (L % (pp * n) != 0)
    TESSERA_CONFIG_FAIL("model.num_layers = ", L, " is not divisible by parallel.pipeline_model_parallel_size (", pp,
                        ") x parallel.num_layers_per_virtual_pipeline_stage (", n, ")");
  return static_cast<int>(L / (pp * n));
}

std::vector<models::ChunkLayout> pipeline_chunk_layouts(int64_t num_layers, const ParallelConfig& parallel, int pp,
                                                        int rank) {
  const int64_t L = num_layers;
  TESSERA_CHECK(pp >= 1 && rank >= 0 && rank < pp, "pipeline stage ", rank, " of ", pp);
  const int V = pipeline_num_chunks(num_layers, parallel);
  std::vector<models::ChunkLayout> chunks;
  if (V > 1) {
    const int64_t n = parallel.num_layers_per_virtual_pipeline_stage;
    for (int c = 0; c < V; ++c) {
      models::ChunkLayout layout;
      layout.has_embedding = rank == 0 && c == 0;
      layout.has_head = rank == pp - 1 && c == V - 1;
      layout.first_layer = c * (L / V) + rank * n;
      layout.num_layers = n;
      chunks.push_back(layout);
    }
    return chunks;
  }
  std::vector<int64_t> split = parse_pipeline_layer_split(parallel.pipeline_layer_split);
  if (split.empty()) {
    if (L % pp != 0)
      TESSERA_CONFIG_FAIL("model.num_layers = ", L, " is not divisible by parallel.pipeline_model_parallel_size = ", pp,
                          "; choose a divisor or give the layers per stage with parallel.pipeline_layer_split "
                          "(e.g. \"", L / pp + 1, ",...\")");
    split.assign(static_cast<size_t>(pp), L / pp);
  }
  if (static_cast<int64_t>(split.size()) != pp ||
      std::accumulate(split.begin(), split.end(), int64_t{0}) != L)
    TESSERA_CONFIG_FAIL("parallel.pipeline_layer_split = \"", parallel.pipeline_layer_split, "\" must list ",
                        pp, " layer counts (one per pipeline stage) summing to model.num_layers = ", L);
  models::ChunkLayout layout;
  layout.has_embedding = rank == 0;
  layout.has_head = rank == pp - 1;
  layout.first_layer = std::accumulate(split.begin(), split.begin() + rank, int64_t{0});
  layout.num_layers = split[static_cast<size_t>(rank)];
  chunks.push_back(layout);
  return chunks;
}

}  // namespace tessera::parallel
