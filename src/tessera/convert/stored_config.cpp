#include "tessera/convert/stored_config.h"

#include <algorithm>
#include <sstream>
#include <toml++/toml.h>

#include "tessera/core/error.h"

namespace tessera::convert {

std::string nlohmann_style_quote(const std::string& s);

namespace {

toml::table parse(const std::string& text, const std::string& where) {
  try {
    return toml::parse(text);
  } catch (const toml::parse_error& e) {
    TESSERA_CONFIG_FAIL(where, ": the stored config is not valid TOML: ", e.description());
  }
}

// A TOML literal of a scalar node ("" for arrays and tables).
std::string literal(const toml::node& node) {
  std::ostringstream out;
  if (auto s = node.value_exact<std::string>()) return nlohmann_style_quote(*s);
  if (auto i = node.value_exact<int64_t>()) return std::to_string(*i);
  if (auto b = node.value_exact<bool>()) return *b ? "true" : "false";
  if (auto d = node.value_exact<double>()) {
    out.precision(17);
    out << *d;
    std::string s = out.str();
    if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
    return s;
  }
  return "";
}

}  // namespace

std::vector<std::string> stored_keys(const std::string& toml_text, const std::vector<std::string>& sections,
                                     const std::string& where) {
  toml::table root = parse(toml_text, where);
  std::vector<std::string> out;
  for (const std::string& section : sections) {
    const toml::table* table = root[section].as_table();
    if (!table) continue;
    for (const auto& [key, node] : *table) {
      if (!train::find_key(section, key.str())) continue;
      std::string value = literal(node);
      if (!value.empty()) out.push_back(section + "." + std::string(key.str()) + "=" + value);
    }
  }
  return out;
}

train::Config conversion_config(const std::vector<std::string>& overrides, int64_t vocab_size) {
  std::vector<std::string> all = overrides;
  all.push_back("data.mock_data=true");
  all.push_back("data.vocab_size=" + std::to_string(vocab_size));
  all.push_back("logging.metrics_file=\"\"");
  return train::load_config("", all);
}

int64_t stored_vocab_size(const ckpt::CheckpointReader& reader) {
  const std::string common = (reader.folder() / "common.h5").string();
  auto info = reader.model_info();
  if (info.count("vocab_size") && info["vocab_size"] > 0) return info["vocab_size"];
  for (const std::string& kv : stored_keys(reader.config_toml(), {"data"}, common))
    if (kv.rfind("data.vocab_size=", 0) == 0) {
      const int64_t v = std::stoll(kv.substr(16));
      if (v > 0) return v;
    }
  TESSERA_CONFIG_FAIL(common, ": neither /model_info nor the stored config's data.vocab_size gives the vocabulary size");
}

std::string replace_toml_keys(const std::string& toml_text, const std::map<std::string, std::string>& values,
                              const std::string& where) {
  toml::table root = parse(toml_text, where);
  for (const auto& [dotted, value] : values) {
    const auto dot = dotted.find('.');
    TESSERA_CHECK(dot != std::string::npos, "key ", dotted, " needs a table");
    const std::string section = dotted.substr(0, dot), key = dotted.substr(dot + 1);
    toml::table parsed = toml::parse("v = " + value);
    if (!root[section].as_table()) root.insert_or_assign(section, toml::table{});
    toml::table& table = *root[section].as_table();
    const toml::node& node = *parsed.get("v");
    if (auto v = node.value_exact<int64_t>()) table.insert_or_assign(key, *v);
    else if (auto d = node.value_exact<double>()) table.insert_or_assign(key, *d);
    else if (auto b = node.value_exact<bool>()) table.insert_or_assign(key, *b);
    else if (auto t = node.value_exact<std::string>()) table.insert_or_assign(key, *t);
    else TESSERA_FAIL("replace_toml_keys: ", dotted, " = ", value, " is not a scalar");
  }
  std::ostringstream out;
  out << root << "\n";
  return out.str();
}

std::string nlohmann_style_quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

}  // namespace tessera::convert
