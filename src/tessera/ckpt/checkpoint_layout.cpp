// Checkpoint directory names, the tracker file and the pruning of old and interrupted saves.
#include "tessera/ckpt/checkpoint_layout.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "tessera/core/error.h"

namespace tessera::ckpt {

namespace fs = std::filesystem;

namespace {
std::string padded(int64_t value, int width) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%0*lld", width, static_cast<long long>(value));
  return buffer;
}

// "iter_0000100" -> 100; anything else (temporaries included) -> nullopt.
std::optional<int64_t> parse_iteration_dir(const std::string& name) {
  if (name.size() != 12 || name.rfind("iter_", 0) != 0) return std::nullopt;
  for (size_t i = 5; i < name.size(); ++i)
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
  return std::stoll(name.substr(5));
}
}  // namespace

std::string iteration_dir_name(int64_t iteration) {
  TESSERA_CHECK(iteration >= 0 && iteration <= 9999999, "checkpoint iteration ", iteration,
                " does not fit iter_%07d");
  return "iter_" + padded(iteration, 7);
}

std::string model_shard_file_name(const ShardCoordinates& c) {
  std::string name = "mp_rank_" + padded(c.tp_rank, 2) + "_" + padded(c.pp_rank, 3);
  if (c.ep_size > 1) name += "_" + padded(c.ep_rank, 3);
  return name + ".h5";
}

std::string distributed_optimizer_file_name(const ShardCoordinates& c) {
  std::string name = "distrib_optim_" + padded(c.tp_rank, 2) + "_" + padded(c.pp_rank, 3);
  if (c.ep_size > 1) name += "_" + padded(c.ep_rank, 3);
  return name + "_" + padded(c.dp_rank, 3) + ".h5";
}

std::optional<TrackerValue> read_tracker(const fs::path& dir) {
  fs::path path = dir / kTrackerFile;
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream content;
  content << in.rdbuf();
  std::string text = content.str();
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.erase(text.begin());
  if (text == "release") return TrackerValue{true, 0};
  bool digits = !text.empty() && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits || text.size() > 12)
    TESSERA_FAIL("checkpoint tracker ", path.string(), " holds '", text,
                 "'; expected an iteration number or \"release\"");
  return TrackerValue{false, std::stoll(text)};
}

void fsync_directory(const fs::path& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  TESSERA_CHECK(fd >= 0, "cannot open directory ", dir.string(), " to fsync it");
  int rc = ::fsync(fd);
  ::close(fd);
  TESSERA_CHECK(rc == 0, "fsync of directory ", dir.string(), " failed");
}

void write_tracker_atomically(const fs::path& dir, int64_t iteration) {
  fs::path final_path = dir / kTrackerFile;
  fs::path tmp = dir / (std::string(kTrackerFile) + ".tmp-" + std::to_string(::getpid()));
  {
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    TESSERA_CHECK(fd >= 0, "cannot create ", tmp.string());
    std::string text = std::to_string(iteration);  // Megatron writes the bare number
    ssize_t written = ::write(fd, text.data(), text.size());
    int sync = ::fsync(fd);
    ::close(fd);
    TESSERA_CHECK(written == static_cast<ssize_t>(text.size()) && sync == 0, "writing ", tmp.string(), " failed");
  }
  std::error_code ec;
  fs::rename(tmp, final_path, ec);
  TESSERA_CHECK(!ec, "renaming ", tmp.string(), " to ", final_path.string(), ": ", ec.message());
  fsync_directory(dir);
}

fs::path checkpoint_folder(const fs::path& dir, const TrackerValue& value) {
  return dir / (value.release ? std::string("release") : iteration_dir_name(value.iteration));
}

std::vector<int64_t> list_checkpoints(const fs::path& dir) {
  std::vector<int64_t> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (!entry.is_directory()) continue;
    if (auto it = parse_iteration_dir(entry.path().filename().string())) found.push_back(*it);
  }
  std::sort(found.begin(), found.end());
  return found;
}

std::vector<int64_t> prune_checkpoints(const fs::path& dir, int keep, int64_t protect) {
  std::vector<int64_t> removed;
  if (keep <= 0) return removed;
  std::vector<int64_t> all = list_checkpoints(dir);
  std::erase(all, protect);
  int64_t excess = static_cast<int64_t>(all.size()) + 1 - keep;  // + 1: the protected one counts
  for (int64_t i = 0; i < excess && i < static_cast<int64_t>(all.size()); ++i) {
    std::error_code ec;
    fs::remove_all(dir / iteration_dir_name(all[i]), ec);
    TESSERA_CHECK(!ec, "removing old checkpoint ", (dir / iteration_dir_name(all[i])).string(), ": ", ec.message());
    removed.push_back(all[i]);
  }
  return removed;
}

void remove_stale_temporaries(const fs::path& dir, const std::string& keep_name) {
  std::error_code ec;
  std::vector<fs::path> stale;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::string name = entry.path().filename().string();
    if (name == keep_name || name.rfind("iter_", 0) != 0) continue;
    if (name.find(".tmp-") != std::string::npos || name.find(".old-") != std::string::npos) stale.push_back(entry.path());
  }
  for (const auto& path : stale) fs::remove_all(path, ec);  // best effort: a leftover is harmless
}

}  // namespace tessera::ckpt
