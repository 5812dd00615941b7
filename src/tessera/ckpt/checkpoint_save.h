// Saving a checkpoint from every rank (collective over the world): each rank writes its files into
// <save>/iter_XXXXXXX.tmp-<nonce>/, then after a barrier rank 0 renames the folder, replaces the
// tracker atomically and prunes old checkpoints. A crash before the rename leaves the previous
// checkpoint (and the tracker naming it) untouched.
#pragma once
#include <filesystem>

#include "tessera/ckpt/checkpoint_state.h"
#include "tessera/runtime/communicator.h"

namespace tessera::ckpt {

struct SaveRequest {
  std::filesystem::path save_dir;
  int64_t iteration = 0;
  ShardCoordinates coords;
  std::vector<TensorShard> model;             // this rank's parameters
  const OptimizerState* optimizer = nullptr;  // nullptr: weights only
  TrainingProgress progress;
  CheckpointMetadata metadata;
  int keep_last_n = 0;  // > 0: keep only the newest N complete checkpoints
};

struct SaveResult {
  std::filesystem::path folder;  // <save>/iter_XXXXXXX
  double seconds = 0;
};

// Collective over `world` (every rank calls it). Model shard files are written by DP rank 0 of each
// (tp, pp, ep) shard, distributed-optimizer slices by every rank, common.h5 by world rank 0.
// Test hook: TESSERA_TEST_PAUSE_IN_SAVE_MS=N makes every rank sleep N ms after writing its files
// and before the barrier, so a test can kill a rank while a save is in flight.
SaveResult save_checkpoint(const SaveRequest& request, Communicator& world);

}  // namespace tessera::ckpt
