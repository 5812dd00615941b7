// What checkpoint.load names: the checkpoint folder (its tracker picks the iteration), or one of
// its iter_XXXXXXX folders ("that iteration", Megatron's --ckpt-step without the tracker). A file
// is a ConfigError; a folder with no tracker is "nothing to load" (Megatron warns and starts fresh).
#pragma once
#include <filesystem>
#include <optional>

#include "tessera/ckpt/checkpoint_layout.h"

namespace tessera::ckpt {

struct LoadTarget {
  std::filesystem::path dir;        // the checkpoint folder (holding the tracker)
  std::optional<TrackerValue> which;  // nullopt: nothing to load
  bool from_iteration_folder = false;  // load named an iter_ folder directly
};

LoadTarget resolve_load_target(const std::filesystem::path& load);

// The iteration stored in a checkpoint must be the one its folder name and the tracker say: a
// damaged field would otherwise resume at a random iteration. Error naming common.h5 otherwise.
void check_iteration_agrees(const std::filesystem::path& folder, const TrackerValue& which, int64_t header_iteration,
                            int64_t progress_iteration);

}  // namespace tessera::ckpt
