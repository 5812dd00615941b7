#include "toml_writer.h"

#include <fstream>
#include <sstream>

#include "tessera/core/error.h"

namespace tessera::config_app {

std::string config_toml(const Session& session) {
  std::ostringstream out;
  out << "# Written by tessera-config " << TESSERA_VERSION << ": tessera-train --config THIS_FILE\n";
  std::string section;
  for (const auto& spec : train::config_schema()) {
    if (spec.section != section) {
      section = spec.section;
      out << "\n[" << section << "]\n";
    }
    const ConfigValue& value = session.values.at(std::string(spec.section) + "." + std::string(spec.key));
    std::string line = std::string(spec.key) + " = " + train::format_value(value);
    if (line.size() < 40) line.resize(40, ' ');
    out << line << "  # " << spec.help;
    if (!train::is_supported(spec, value))
      out << "  -- NOT SUPPORTED YET by tessera-train (comes with " << spec.unsupported_reason << ")";
    out << "\n";
  }
  return out.str();
}

void write_config(const Session& session, const std::string& path) {
  std::ofstream out(path, std::ios::out | std::ios::trunc);
  if (!out) TESSERA_CONFIG_FAIL("tessera-config: cannot open '", path, "' for writing");
  out << config_toml(session);
  out.close();
  if (!out) TESSERA_CONFIG_FAIL("tessera-config: writing '", path, "' failed (disk full?)");
}

}  // namespace tessera::config_app
