// Which layers each pipeline stage holds: an even split over stages (or an explicit per-stage
// split, parallel.pipeline_layer_split), or Megatron's virtual-stage chunks (interleaving), as the
// ChunkLayout list of this stage's model chunks.
#pragma once
#include <string>
#include <vector>

#include "tessera/models/stage_model.h"
#include "tessera/runtime/parallel_config.h"

namespace tessera::parallel {

// "3,3,2" -> {3, 3, 2}; "" -> {}. ConfigError naming parallel.pipeline_layer_split otherwise.
std::vector<int64_t> parse_pipeline_layer_split(const std::string& text);

// Model chunks per stage: num_layers / (pp * layers_per_virtual_stage) with interleaving, else 1.
// ConfigError when the layers do not divide.
int pipeline_num_chunks(int64_t num_layers, const ParallelConfig& parallel);

// The chunks of stage `rank` of `pp` (pp = 1: the whole model). Without interleaving: layers split
// evenly (ConfigError when num_layers % pp != 0 and no explicit split is given). With V chunks of
// n = layers_per_virtual_stage layers: chunk c holds [c L/V + rank n, + n) (Megatron's order).
// The embedding is on chunk 0 of stage 0, the head on chunk V-1 of stage pp-1.
std::vector<models::ChunkLayout> pipeline_chunk_layouts(int64_t num_layers, const ParallelConfig& parallel, int pp,
                                                        int rank);

}  // namespace tessera::parallel
