// The commands that run a written config: the sbatch line for jobs/train-gpt.sbatch with the
// node and task counts answered, and the local mpirun line.
#pragma once
#include <string>

#include "session.h"

namespace tessera::config_app {

std::string sbatch_line(const Session& session, const std::string& config_file);
std::string mpirun_line(const Session& session, const std::string& config_file);

}  // namespace tessera::config_app
