#include "session.h"

#include "tessera/train/config.h"

namespace tessera::config_app {

int64_t Session::data_parallel_size() const {
  int64_t model_parallel =
      integer("parallel.tensor_model_parallel_size") * integer("parallel.pipeline_model_parallel_size");
  if (model_parallel <= 0 || world_size() % model_parallel != 0) return 0;
  return world_size() / model_parallel;
}

Session default_session() {
  Session session;
  for (const auto& spec : train::config_schema())
    session.values[std::string(spec.section) + "." + std::string(spec.key)] = spec.default_value;
  return session;
}

void load_existing(Session& session, const std::string& path) {
  // load_config reads, type-checks and validates the file as tessera-train would; its raw values
  // (before derived defaults and path resolution) are what the file says.
  train::Config config = train::load_config(path, {});
  session.values = config.values;
}

}  // namespace tessera::config_app
