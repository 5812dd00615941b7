#include "launch.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

namespace tessera::config_app {

namespace fs = std::filesystem;

namespace {
// $TESSERA_HOME/jobs (the module sets it), else next to this executable (installed: bin/../jobs,
// build tree: build/bin/../../jobs), else the relative path of the source tree.
std::string template_path() {
  if (const char* home = std::getenv("TESSERA_HOME"); home && *home)
    return (fs::path(home) / "jobs" / "train-gpt.sbatch").string();
  std::error_code error;
  fs::path exe = fs::read_symlink("/proc/self/exe", error);
  if (!error)
    for (const char* up : {"..", "../.."}) {
      fs::path candidate = exe.parent_path() / up / "jobs" / "train-gpt.sbatch";
      if (fs::is_regular_file(candidate)) return fs::weakly_canonical(candidate).string();
    }
  return "jobs/train-gpt.sbatch";
}
}  // namespace

std::string sbatch_line(const Session& s, const std::string& config_file) {
  std::string line = "sbatch -N " + std::to_string(s.nodes) + " --ntasks-per-node=" + std::to_string(s.ranks_per_node());
  if (s.gpus_per_node > 0) line += " --gpus-per-node=" + std::to_string(s.gpus_per_node);
  else line += " --gpus-per-node=0 --cpus-per-task=1";
  return line + " " + template_path() + " " + config_file;
}

std::string mpirun_line(const Session& s, const std::string& config_file) {
  return "mpirun -np " + std::to_string(s.world_size()) + " tessera-train --config " + config_file;
}

}  // namespace tessera::config_app
