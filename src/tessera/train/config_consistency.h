// Loading the config on every rank of a job, together: a rank whose config fails to load, or
// whose resolved config differs from rank 0's (different --set, file or environment per rank),
// ends every rank with one message naming the rank and the differing keys, before any model is
// built (different sizes would corrupt memory in collectives, different train_iters would hang).
#pragma once
#include <string>
#include <vector>

#include "tessera/train/config.h"

namespace tessera::train {

// load_config on every rank of MPI_COMM_WORLD, then a comparison of the resolved configs
// (Config::to_toml) with rank 0's. Collective. On failure every rank throws; one rank reports.
Config load_config_on_all_ranks(const std::string& path, const std::vector<std::string>& overrides);

// validate_for_world (the parallel layout and batch against the world size) on every rank
// together: one message, every rank ends. Separate from the load, so that --print-config works
// on any number of ranks and a start point's [model] defaults are in before the check.
void validate_for_world_on_all_ranks(const Config& config);

// "model.hidden_size = 64 (rank 0: 32)"-style list of the keys whose lines differ (TOML text of
// the same schema on both sides).
std::string config_differences(const std::string& mine, const std::string& reference);

}  // namespace tessera::train
