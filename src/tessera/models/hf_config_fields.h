#pragma once
// Reading fields of a Hugging Face config.json for the families' *_hf_names.cpp: present-and-not-null,
// typed reads whose errors name the file and the field (exit 2), and a TOML rendering of a number.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace tessera::models::hf_config {

bool has(const nlohmann::json& c, const char* key);
int64_t integer(const nlohmann::json& c, const std::string& path, const char* key);  // required
double number(const nlohmann::json& c, const std::string& path, const char* key, double fallback);
bool boolean(const nlohmann::json& c, const std::string& path, const char* key, bool fallback);
std::string toml_number(double v);  // always with a '.', an exponent or both: TOML reads it as a float

}  // namespace tessera::models::hf_config
