#include "tessera/convert/convert_options.h"

#include "tessera/ckpt/checkpoint_layout.h"
#include "tessera/core/error.h"

namespace tessera::convert {

namespace fs = std::filesystem;

fs::path resolve_checkpoint_folder(const fs::path& path, std::optional<int64_t> iteration) {
  if (!fs::is_directory(path)) TESSERA_CONFIG_FAIL("checkpoint '", path.string(), "' is not a folder");
  if (fs::exists(path / ckpt::kCommonFile)) {
    if (iteration) TESSERA_CONFIG_FAIL("--iteration needs the save folder (with ", ckpt::kTrackerFile, "), not ", path.string());
    return path;
  }
  if (iteration) {
    fs::path folder = path / ckpt::iteration_dir_name(*iteration);
    if (!fs::is_directory(folder)) TESSERA_CONFIG_FAIL("checkpoint ", folder.string(), " does not exist (--iteration ", *iteration, ")");
    return folder;
  }
  std::optional<ckpt::TrackerValue> tracker;
  try {
    tracker = ckpt::read_tracker(path);
  } catch (const Error& e) {
    TESSERA_CONFIG_FAIL(e.message());
  }
  if (!tracker)
    TESSERA_CONFIG_FAIL("'", path.string(), "' is not a Tessera checkpoint: it has neither ", ckpt::kTrackerFile, " nor ",
                        ckpt::kCommonFile);
  fs::path folder = ckpt::checkpoint_folder(path, *tracker);
  if (!fs::is_directory(folder))
    TESSERA_CONFIG_FAIL((path / ckpt::kTrackerFile).string(), " names ", folder.string(), ", which does not exist");
  return folder;
}

}  // namespace tessera::convert
