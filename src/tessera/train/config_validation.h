// Checks on a loaded Config beyond types and the cross-key rules of load_config: numbers that
// are finite and in range, sizes whose products fit memory arithmetic, strings with a grammar
// (data.split), and paths that must be usable before training starts (checkpoint.save writable,
// checkpoint.load not a file). Every failure is a ConfigError naming the key and where its value
// came from (the --set that gave it, else the config file).
#pragma once
#include <string>
#include <vector>

namespace tessera::train {

struct Config;

// Where a key's value came from: "--set model.hidden_size=64: " when an override set it, else
// "FILE: " (or "" without a config file). Overrides are "table.key=value" strings.
class ConfigOrigin {
 public:
  ConfigOrigin(std::string config_path, std::vector<std::string> overrides);
  std::string of_key(const std::string& dotted_key) const;
  // The origin of the first schema key named at the start of `message` ("model.x = 3 must ...").
  std::string of_message(const std::string& message) const;

 private:
  std::string path_;
  std::vector<std::string> overrides_;
};

// Runs after the derived defaults are filled in and before load_config's own cross-key rules.
void validate_config(const Config& config, const ConfigOrigin& origin);

// "did you mean 'model.hidden_size'?" for a near miss; for nothing close, where to find the keys.
std::string key_suggestion(const std::string& dotted_key);

}  // namespace tessera::train
