// The table of every config key tessera-train knows: section, name, type, default, help, and
// whether it is supported yet. Parsing (config.cpp) and --help both read this one table.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace tessera::train {

enum class ValueType { integer, floating, boolean, string, data_path, integer_list };

// A data_path is a list of prefixes optionally preceded by weights: ["a"] or [0.3, "a", 0.7, "b"].
using DataPathEntry = std::variant<double, std::string>;
using ConfigValue = std::variant<int64_t, double, bool, std::string, std::vector<DataPathEntry>, std::vector<int64_t>>;

struct KeySpec {
  std::string_view section;
  std::string_view key;
  ValueType type;
  ConfigValue default_value;
  std::string_view help;
  // Empty when supported. Otherwise the capability that will add it; setting the key to anything
  // but its default is rejected with "not supported yet".
  std::string_view unsupported_reason = {};
  std::vector<ConfigValue> supported_values = {};  // when set: only these values work today
};

// The fixed keys, then the [loss] table: the parameters every registered loss declares
// (models/loss_registry.h; a plugin registers its loss before the first call).
const std::vector<KeySpec>& config_schema();
const KeySpec* find_key(std::string_view section, std::string_view key);
std::string value_type_name(ValueType type);
// The values a string key allows, read from its help ("none | selective | full"); empty when the
// help is not such a list (free-form strings).
std::vector<std::string> allowed_choices(const KeySpec& spec);
bool is_supported(const KeySpec& spec, const ConfigValue& value);  // false: "not supported yet"
std::string format_value(const ConfigValue& value);  // TOML literal
std::string closest_key(std::string_view dotted);    // "model.hiden_size" -> "model.hidden_size"

}  // namespace tessera::train
