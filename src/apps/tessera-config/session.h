// What tessera-config is building: every config key's value (the schema's keys, defaults first),
// and the launch shape that is not a config key (machines, GPUs or CPU ranks per node).
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "tessera/train/config_schema.h"

namespace tessera::config_app {

using train::ConfigValue;

struct Session {
  std::map<std::string, ConfigValue> values;  // "section.key" -> value, every key of the schema
  int64_t nodes = 1;
  int64_t gpus_per_node = 8;       // 0: a CPU-only run
  int64_t cpu_ranks_per_node = 4;  // ranks per node when gpus_per_node = 0
  std::string output;              // the TOML file to write

  int64_t ranks_per_node() const { return gpus_per_node > 0 ? gpus_per_node : cpu_ranks_per_node; }
  int64_t world_size() const { return nodes * ranks_per_node(); }
  int64_t integer(const std::string& key) const { return std::get<int64_t>(values.at(key)); }
  bool boolean(const std::string& key) const { return std::get<bool>(values.at(key)); }
  const std::string& string(const std::string& key) const { return std::get<std::string>(values.at(key)); }
  int64_t data_parallel_size() const;  // world / (TP x PP); 0 when that does not divide
};

Session default_session();  // the schema's defaults
// Replaces the values with an existing config's (every key; missing ones keep the defaults).
// Throws ConfigError naming the file and key when it does not load.
void load_existing(Session& session, const std::string& path);

}  // namespace tessera::config_app
