#include "tessera/ckpt/load_target.h"

#include "tessera/core/error.h"

namespace tessera::ckpt {

namespace fs = std::filesystem;

LoadTarget resolve_load_target(const fs::path& load) {
  std::error_code ec;
  if (fs::exists(load, ec) && !fs::is_directory(load, ec))
    TESSERA_CONFIG_FAIL("checkpoint.load = \"", load.string(), "\" is a file; give the checkpoint folder (holding ",
                        kTrackerFile, ") or one of its iter_XXXXXXX folders");
  fs::path trimmed = load.filename().empty() ? load.parent_path() : load;  // "dir/iter_0000010/"
  const std::string name = trimmed.filename().string();
  if (name.size() == 12 && name.rfind("iter_", 0) == 0 &&
      name.find_first_not_of("0123456789", 5) == std::string::npos && fs::is_directory(trimmed, ec)) {
    TrackerValue value;
    value.iteration = std::stoll(name.substr(5));
    return {trimmed.parent_path(), value, true};
  }
  return {load, read_tracker(load), false};
}

void check_iteration_agrees(const fs::path& folder, const TrackerValue& which, int64_t header_iteration,
                            int64_t progress_iteration) {
  const fs::path common = folder / kCommonFile;
  if (header_iteration != progress_iteration)
    TESSERA_FAIL("checkpoint file ", common.string(), " is corrupt: its header says iteration ", header_iteration,
                 " but /progress says ", progress_iteration);
  if (!which.release && progress_iteration != which.iteration)
    TESSERA_FAIL("checkpoint file ", common.string(), " is corrupt or misplaced: it holds iteration ",
                 progress_iteration, " but its folder ", folder.filename().string(), " (and the tracker) say ",
                 which.iteration);
}

}  // namespace tessera::ckpt
