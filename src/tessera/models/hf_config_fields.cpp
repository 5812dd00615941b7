#include "tessera/models/hf_config_fields.h"

#include "tessera/core/error.h"

namespace tessera::models::hf_config {

bool has(const nlohmann::json& c, const char* key) { return c.contains(key) && !c[key].is_null(); }

int64_t integer(const nlohmann::json& c, const std::string& path, const char* key) {
  if (!has(c, key)) TESSERA_CONFIG_FAIL(path, ": missing field '", key, "'");
  if (!c[key].is_number_integer()) TESSERA_CONFIG_FAIL(path, ": field '", key, "' must be an integer, got ", c[key].dump());
  return c[key].get<int64_t>();
}

double number(const nlohmann::json& c, const std::string& path, const char* key, double fallback) {
  if (!has(c, key)) return fallback;
  if (!c[key].is_number()) TESSERA_CONFIG_FAIL(path, ": field '", key, "' must be a number, got ", c[key].dump());
  return c[key].get<double>();
}

bool boolean(const nlohmann::json& c, const std::string& path, const char* key, bool fallback) {
  if (!has(c, key)) return fallback;
  if (!c[key].is_boolean()) TESSERA_CONFIG_FAIL(path, ": field '", key, "' must be true or false, got ", c[key].dump());
  return c[key].get<bool>();
}

std::string toml_number(double v) {
  std::string s = nlohmann::json(v).dump();
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

}  // namespace tessera::models::hf_config
