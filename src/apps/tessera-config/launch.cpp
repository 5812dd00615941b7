#include "launch.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

namespace tessera::config_app {

namespace fs = std::filesystem;

namespace {
// $TESSERA_HOME/jobs (the module sets it), else next to this executable (installed: bin/../jobs,
// build tree: build/bin/../../jobs), else the relative path of the source tree. The template is
// the architecture's (train-gpt, train-bert, train-t5: each refuses the others' configs).
std::string template_path(const std::string& architecture) {
  const std::string name = "train-" + architecture + ".sbatch";
  if (const char* home = std::getenv("TESSERA_HOME"); home && *home)
    return (fs::path(home) / "jobs" / name).string();
  std::error_code error;
  fs::path exe = fs::read_symlink("/proc/self/exe", error);
  if (!error)
    for (const char* up : {"..", "../.."}) {
      fs::path candidate = exe.parent_path() / up / "jobs" / name;
      if (fs::is_regular_file(candidate)) return fs::weakly_canonical(candidate).string();
    }
  return "jobs/" + name;
}
}  // namespace

std::string sbatch_line(const Session& s, const std::string& config_file) {
  std::string line = "sbatch -N " + std::to_string(s.nodes) + " --ntasks-per-node=" + std::to_string(s.ranks_per_node());
  if (s.gpus_per_node > 0) line += " --gpus-per-node=" + std::to_string(s.gpus_per_node);
  else line += " --gpus-per-node=0 --cpus-per-task=1";
  const auto* architecture = std::get_if<std::string>(&s.values.at("model.architecture"));
  return line + " " + template_path(architecture ? *architecture : "gpt") + " " + config_file;
}

std::string mpirun_line(const Session& s, const std::string& config_file) {
  return "mpirun -np " + std::to_string(s.world_size()) + " tessera-train --config " + config_file;
}

}  // namespace tessera::config_app
