// Names and files of a checkpoint directory: iter_%07d folders, mp_rank_TT_PPP[_EEE].h5 shard files,
// the tracker file (atomic replace), temporary save folders and keep-last-N pruning.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "tessera/ckpt/checkpoint_state.h"

namespace tessera::ckpt {

inline constexpr const char* kTrackerFile = "latest_checkpointed_iteration.txt";
inline constexpr const char* kCommonFile = "common.h5";

std::string iteration_dir_name(int64_t iteration);  // "iter_0000100"
// "mp_rank_01_002.h5" (tp 2 digits, pp 3 digits) with "_EEE" when ep_size > 1.
std::string model_shard_file_name(const ShardCoordinates& c);
// "distrib_optim_01_002_003.h5": the distributed optimizer's slices of DP rank 3 of shard (1, 2).
std::string distributed_optimizer_file_name(const ShardCoordinates& c);

// What the tracker says: an iteration, or release (a weights-only checkpoint in <dir>/release/).
struct TrackerValue {
  bool release = false;
  int64_t iteration = 0;
};
// Reads <dir>/latest_checkpointed_iteration.txt; nullopt when absent. Malformed content is an Error
// naming the file.
std::optional<TrackerValue> read_tracker(const std::filesystem::path& dir);
// Writes the tracker through a temporary file and rename(), so readers see the old or the new value.
void write_tracker_atomically(const std::filesystem::path& dir, int64_t iteration);
// The folder a tracker value names.
std::filesystem::path checkpoint_folder(const std::filesystem::path& dir, const TrackerValue& value);

// Complete checkpoints in dir (iter_XXXXXXX folders, no temporary ones), ascending.
std::vector<int64_t> list_checkpoints(const std::filesystem::path& dir);
// Removes the oldest complete checkpoints so at most keep remain (keep <= 0: keep all); never removes
// `protect`. Returns the removed iterations.
std::vector<int64_t> prune_checkpoints(const std::filesystem::path& dir, int keep, int64_t protect);
// Removes leftovers of interrupted saves (iter_*.tmp-* and iter_*.old-* folders) except `keep_name`.
void remove_stale_temporaries(const std::filesystem::path& dir, const std::string& keep_name);

void fsync_directory(const std::filesystem::path& dir);

}  // namespace tessera::ckpt
