// Saving a checkpoint from every rank (collective over the world): each rank writes its files into
// <save>/iter_XXXXXXX.tmp-<nonce>/, then after a barrier rank 0 renames the folder, replaces the
// tracker atomically and prunes old checkpoints. A crash before the rename leaves the previous
// checkpoint (and the tracker naming it) untouched.
#pragma once
#include <chrono>
#include <exception>
#include <filesystem>
#include <memory>

#include "tessera/ckpt/checkpoint_state.h"
#include "tessera/core/buffer.h"
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

// save_checkpoint in three steps, so the file writing can run on another thread (async save):
// prepare (collective: the nonce, the temporary folder, the rank table), write this rank's files
// (local, no communication), finish (collective: agree that every rank wrote, or fail together
// removing the temporary folder; then barrier, rename, tracker, pruning).
struct PreparedSave {
  std::filesystem::path tmp;
  std::string nonce;
  std::shared_ptr<Buffer> rank_table;  // world_size x 6 int64
  std::chrono::steady_clock::time_point start;
};
PreparedSave prepare_save(const SaveRequest& request, Communicator& world);
void write_save_files(const SaveRequest& request, const PreparedSave& prepared);
SaveResult finish_save(const SaveRequest& request, const PreparedSave& prepared, Communicator& world,
                       std::exception_ptr local_failure);

}  // namespace tessera::ckpt
