// The config a checkpoint stores (common.h5 /config_toml) as converter input: its keys as
// "table.key=value" overrides, a Config for conversions (model keys + a layout, no data files
// needed), and the stored TOML with the layout keys replaced for a resharded copy.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "tessera/ckpt/checkpoint_reader.h"
#include "tessera/train/config.h"

namespace tessera::convert {

// The schema keys of `sections` present in toml_text, as overrides (keys the schema does not know
// are skipped). ConfigError naming `where` when the text is not TOML.
std::vector<std::string> stored_keys(const std::string& toml_text, const std::vector<std::string>& sections,
                                     const std::string& where);

// A Config for converting a model with vocab_size real tokens: defaults, then `overrides`
// (model and layout keys), with mock data so no data files are needed.
train::Config conversion_config(const std::vector<std::string>& overrides, int64_t vocab_size);

// The real vocabulary size of a checkpoint: common.h5 /model_info vocab_size, else the stored
// config's data.vocab_size (mock data, NullTokenizer). ConfigError naming common.h5 when neither.
int64_t stored_vocab_size(const ckpt::CheckpointReader& reader);

// toml_text with each "table.key" of `values` (TOML literals) replaced or added.
std::string replace_toml_keys(const std::string& toml_text, const std::map<std::string, std::string>& values,
                              const std::string& where);

}  // namespace tessera::convert
