// Writes the session's config as TOML: every key of the schema, grouped by table, each with its
// help as a comment, and a note on each value that tessera-train does not support yet. The same
// values give the same bytes (interactive and --defaults runs are compared byte for byte).
#pragma once
#include <string>

#include "session.h"

namespace tessera::config_app {

std::string config_toml(const Session& session);
void write_config(const Session& session, const std::string& path);  // throws ConfigError on failure

}  // namespace tessera::config_app
