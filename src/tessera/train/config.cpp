#include "tessera/train/config.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <sstream>
#include <toml++/toml.h>

#include "tessera/core/error.h"
#include "tessera/core/logging.h"
#include "tessera/train/config_validation.h"
#include "tessera/nn/recompute.h"

namespace tessera::train {

namespace fs = std::filesystem;

namespace {

// File-system queries on paths from a config: a name the OS refuses (too long, ...) is a path that
// does not exist, never an exception out of the check that would name it.
bool path_exists(const fs::path& p) {
  std::error_code ec;
  return fs::exists(p, ec);
}
bool is_regular_file_path(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}
bool is_directory_path(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}

std::string node_type_name(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::string: return "string";
    case toml::node_type::integer: return "integer";
    case toml::node_type::floating_point: return "number";
    case toml::node_type::boolean: return "boolean";
    case toml::node_type::array: return "array";
    case toml::node_type::table: return "table";
    default: return "date/time";
  }
}

// `where` is "FILE:LINE: " or "--set " and prefixes every message.
ConfigValue convert(const toml::node& node, const KeySpec& spec, const std::string& where) {
  std::string key = std::string(spec.section) + "." + std::string(spec.key);
  auto wrong = [&]() -> ConfigValue {
    TESSERA_CONFIG_FAIL(where, key, " must be ", value_type_name(spec.type), ", got ", node_type_name(node));
  };
  switch (spec.type) {
    case ValueType::integer:
      if (auto v = node.value_exact<int64_t>()) return *v;
      return wrong();
    case ValueType::floating:
      if (auto v = node.value_exact<double>()) return *v;
      if (auto v = node.value_exact<int64_t>()) return static_cast<double>(*v);
      return wrong();
    case ValueType::boolean:
      if (auto v = node.value_exact<bool>()) return *v;
      return wrong();
    case ValueType::string:
      if (auto v = node.value_exact<std::string>()) return *v;
      return wrong();
    case ValueType::integer_list: {
      const toml::array* array = node.as_array();
      if (!array) return wrong();
      std::vector<int64_t> items;
      for (const toml::node& item : *array) {
        if (auto v = item.value_exact<int64_t>()) items.push_back(*v);
        else TESSERA_CONFIG_FAIL(where, key, " entries must be integers, got ", node_type_name(item));
      }
      return items;
    }
    case ValueType::data_path: {
      std::vector<DataPathEntry> entries;
      if (auto v = node.value_exact<std::string>()) {
        entries.emplace_back(*v);
        return entries;
      }
      const toml::array* array = node.as_array();
      if (!array) return wrong();
      for (const toml::node& item : *array) {
        if (auto s = item.value_exact<std::string>()) entries.emplace_back(*s);
        else if (auto d = item.value<double>()) entries.emplace_back(*d);
        else TESSERA_CONFIG_FAIL(where, key, " entries must be strings (prefixes) or numbers (weights), got ",
                                 node_type_name(item));
      }
      return entries;
    }
  }
  return wrong();
}

const KeySpec& lookup(const std::string& section, const std::string& key, const std::string& where) {
  const KeySpec* spec = find_key(section, key);
  if (!spec) {
    std::string dotted = section + "." + key;
    TESSERA_CONFIG_FAIL(where, "unknown key '", dotted, "'; ", key_suggestion(dotted));
  }
  return *spec;
}

std::string file_location(const std::string& path, const toml::node& node) {
  const auto& src = node.source();
  if (src.begin.line) return path + ":" + std::to_string(src.begin.line) + ": ";
  return path + ": ";
}

void read_file(const std::string& path, std::map<std::string, ConfigValue>& values) {
  if (!path_exists(path)) TESSERA_CONFIG_FAIL("config file '", path, "' does not exist");
  if (!is_regular_file_path(path)) TESSERA_CONFIG_FAIL("config file '", path, "' is not a regular file (a folder?)");
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    TESSERA_CONFIG_FAIL(path, ":", e.source().begin.line, ":", e.source().begin.column, ": TOML syntax error: ",
                        e.description());
  }
  for (const auto& [section_key, section_node] : root) {
    std::string section(section_key.str());
    const toml::table* table = section_node.as_table();
    if (!table) {
      TESSERA_CONFIG_FAIL(file_location(path, section_node), "top-level key '", section,
                          "' must be inside a table; did you mean '", closest_key(section), "'?");
    }
    bool known_section = false;
    for (const auto& spec : config_schema()) known_section |= spec.section == section;
    for (const auto& [key, node] : *table) {
      std::string where = file_location(path, node);
      if (!known_section) {
        std::string dotted = section + "." + std::string(key.str());
        TESSERA_CONFIG_FAIL(where, "unknown table [", section, "] (key '", dotted, "'); ", key_suggestion(dotted));
      }
      const KeySpec& spec = lookup(section, std::string(key.str()), where);
      values[section + "." + std::string(key.str())] = convert(node, spec, where);
    }
  }
}

std::string resolve_path(const std::string& path, const std::string& config_dir) {
  if (path.empty() || fs::path(path).is_absolute()) return path;
  auto exists = [](const fs::path& p) {
    return path_exists(p) || path_exists(p.string() + ".idx") || path_exists(p.string() + ".bin");
  };
  if (exists(path)) return path;
  if (!config_dir.empty() && exists(fs::path(config_dir) / path)) return (fs::path(config_dir) / path).string();
  if (const char* home = std::getenv("TESSERA_HOME"); home && exists(fs::path(home) / path))
    return (fs::path(home) / path).string();
  return path;
}

template <typename T>
T get(const std::map<std::string, ConfigValue>& values, const char* key) {
  return std::get<T>(values.at(key));
}

void check_supported(const std::map<std::string, ConfigValue>& values, const ConfigOrigin& origin) {
  for (const auto& spec : config_schema()) {
    if (spec.supported_values.empty()) continue;
    std::string dotted = std::string(spec.section) + "." + std::string(spec.key);
    const ConfigValue& v = values.at(dotted);
    bool ok = false;
    for (const auto& allowed : spec.supported_values) ok |= allowed == v;
    if (ok) continue;
    std::string allowed_list;
    for (const auto& allowed : spec.supported_values) allowed_list += (allowed_list.empty() ? "" : ", ") + format_value(allowed);
    std::string source = origin.of_key(dotted);
    if (spec.unsupported_reason.empty())
      TESSERA_CONFIG_FAIL(source, dotted, " = ", format_value(v), " is not allowed; allowed: ", allowed_list);
    TESSERA_CONFIG_FAIL(source, dotted, " = ", format_value(v), " is not supported yet (it comes with ",
                        spec.unsupported_reason, "); supported today: ", allowed_list);
  }
}

// The [loss] values of training.loss's loss; a [loss] key of another loss set to a non-default
// value is an error (it would be ignored). Builds the loss once so a bad parameter fails here.
models::LossParams resolve_loss_params(const std::string& loss, const std::map<std::string, ConfigValue>& values,
                                       const ConfigOrigin& origin) {
  const models::LossRegistration& chosen = models::loss_registration(loss);
  std::map<std::string, models::LossParamValue> params;
  for (const auto& spec : config_schema()) {
    if (spec.section != "loss") continue;
    const std::string key(spec.key);
    const ConfigValue& v = values.at("loss." + key);
    const models::LossRegistration* owner = models::loss_declaring(key);
    if (owner != &chosen) {
      if (v != spec.default_value)
        TESSERA_CONFIG_FAIL(origin.of_key("loss." + key), "loss.", key, " is a parameter of training.loss = \"", owner->name,
                            "\", but training.loss = \"", loss, "\"; remove it or choose that loss");
      continue;
    }
    std::visit(
        [&](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, double> || std::is_same_v<T, std::string> ||
                        std::is_same_v<T, std::vector<int64_t>>)
            params[key] = x;
          else
            TESSERA_CHECK(false, "loss.", key, " has an unexpected type");
        },
        v);
  }
  models::LossParams resolved(std::move(params));
  chosen.build(resolved);
  return resolved;
}

void require(bool ok, const ConfigOrigin& origin, const std::string& message) {
  if (!ok) TESSERA_CONFIG_FAIL(origin.of_message(message), message);
}

// The mixture-of-experts keys (docs/moe.md): ranges, and what the MoE layer does not run yet.
void check_moe_keys(const models::TransformerConfig& m, const ParallelConfig& p, const TrainingConfig& t,
                    const ConfigOrigin& src) {
  const std::string experts = std::to_string(m.num_experts);
  require(m.num_experts >= 0, src, "model.num_experts = " + experts + " must be >= 0 (0: a dense model)");
  if (m.num_experts == 0) {
    require(p.expert_model_parallel_size == 1, src,
            "parallel.expert_model_parallel_size = " + std::to_string(p.expert_model_parallel_size) +
                " needs model.num_experts > 0 (a dense model has no experts to split)");
    return;
  }
  require(m.moe_router_topk >= 1 && m.moe_router_topk <= m.num_experts, src,
          "model.moe_router_topk = " + std::to_string(m.moe_router_topk) + " must be in [1, model.num_experts = " +
              experts + "]");
  require(p.expert_model_parallel_size >= 1 && m.num_experts % p.expert_model_parallel_size == 0, src,
          "parallel.expert_model_parallel_size = " + std::to_string(p.expert_model_parallel_size) +
              " must divide model.num_experts = " + experts + " (each EP rank holds num_experts / EP experts)");
  require(m.moe_ffn_hidden_size >= 0, src, "model.moe_ffn_hidden_size must be >= 0 (0: model.ffn_hidden_size)");
  require(m.moe_aux_loss_coeff >= 0, src, "model.moe_aux_loss_coeff must be >= 0");
  require(m.moe_z_loss_coeff >= 0, src, "model.moe_z_loss_coeff must be >= 0");
  require(m.moe_expert_capacity_factor >= 0, src, "model.moe_expert_capacity_factor must be >= 0 (0: dropless)");
  require(!m.moe_pad_expert_input_to_capacity || m.moe_expert_capacity_factor > 0, src,
          "model.moe_pad_expert_input_to_capacity = true needs model.moe_expert_capacity_factor > 0");
  require(m.moe_shared_expert_intermediate_size >= 0, src, "model.moe_shared_expert_intermediate_size must be >= 0");
  require(m.moe_layer_freq >= 1, src,
          "model.moe_layer_freq = " + std::to_string(m.moe_layer_freq) + " must be >= 1 (1: every layer)");
  require(m.architecture == "gpt", src,
          "model.num_experts = " + experts + " is not supported yet by model.architecture = " + m.architecture +
              " (mixture of experts is built for gpt)");
  require(t.device != "cuda" || p.expert_model_parallel_size == 1, src,
          "parallel.expert_model_parallel_size = " + std::to_string(p.expert_model_parallel_size) +
              " is not supported yet with training.device = cuda (the GPU MoE layer runs EP = 1; docs/moe-gpu.md)");
}

}  // namespace

ConfigValue parse_value_text(const KeySpec& spec, const std::string& raw, const std::string& where) {
  toml::table parsed;
  try {
    parsed = toml::parse("v = " + raw);
  } catch (const toml::parse_error& e) {
    if (spec.type == ValueType::integer || spec.type == ValueType::floating)  // e.g. out of int64 range
      TESSERA_CONFIG_FAIL(where, spec.section, ".", spec.key, " must be ", value_type_name(spec.type), "; '", raw,
                          "' is not one: ", e.description());
    parsed = toml::table{{"v", raw}};  // a bare word: take it as a string
  }
  if (spec.type == ValueType::string && !parsed["v"].is_string()) parsed = toml::table{{"v", raw}};
  return convert(*parsed.get("v"), spec, where);
}

void apply_override(const std::string& text, std::map<std::string, ConfigValue>& values) {
  auto eq = text.find('=');
  auto dot = text.find('.');
  if (eq == std::string::npos || dot == std::string::npos || dot > eq)
    TESSERA_CONFIG_FAIL("--set '", text, "': expected table.key=value, e.g. --set training.train_iters=100");
  std::string section = text.substr(0, dot), key = text.substr(dot + 1, eq - dot - 1), raw = text.substr(eq + 1);
  std::string where = "--set " + text + ": ";
  const KeySpec& spec = lookup(section, key, where);
  values[section + "." + key] = parse_value_text(spec, raw, where);
}

std::vector<std::pair<std::string, ConfigValue>> architecture_layer_defaults(const std::string& architecture) {
  if (architecture != "t5") return {};
  return {{"model.position_embedding_type", std::string("relative")},
          {"model.normalization", std::string("rmsnorm")},
          {"model.activation", std::string("relu")},
          {"model.add_bias_linear", false}};
}

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  Config config;
  config.source = path;
  auto& values = config.values;
  for (const auto& spec : config_schema())
    values[std::string(spec.section) + "." + std::string(spec.key)] = spec.default_value;
  values["training.precision"] = std::string();  // unset, told apart from an explicit "bf16"
  // Keys whose default depends on model.architecture start unset (told apart from an explicit value):
  // t5 defaults to relative positions, rmsnorm, relu and no biases, the others to the schema's.
  const std::string unset = "\x01unset";
  for (const auto& entry : architecture_layer_defaults("t5")) values[entry.first] = unset;
  if (!path.empty()) read_file(path, values);
  for (const auto& text : overrides) apply_override(text, values);
  const auto family = architecture_layer_defaults(std::get<std::string>(values.at("model.architecture")));
  for (const auto& entry : architecture_layer_defaults("t5")) {
    const std::string& key = entry.first;
    const auto* v = std::get_if<std::string>(&values.at(key));
    if (!v || *v != unset) continue;
    const auto dot = key.find('.');
    values[key] = find_key(key.substr(0, dot), key.substr(dot + 1))->default_value;
    for (const auto& [family_key, family_value] : family)
      if (family_key == key) values[key] = family_value;
  }
  const bool precision_defaulted = std::get<std::string>(values.at("training.precision")).empty();
  if (precision_defaulted) values["training.precision"] = find_key("training", "precision")->default_value;
  const ConfigOrigin src(path, overrides);
  check_supported(values, src);

  auto& m = config.model;
  m.architecture = get<std::string>(values, "model.architecture");
  m.num_layers = get<int64_t>(values, "model.num_layers");
  m.hidden_size = get<int64_t>(values, "model.hidden_size");
  m.num_attention_heads = get<int64_t>(values, "model.num_attention_heads");
  m.num_query_groups = get<int64_t>(values, "model.num_query_groups");
  m.ffn_hidden_size = get<int64_t>(values, "model.ffn_hidden_size");
  m.seq_length = get<int64_t>(values, "model.seq_length");
  m.max_position_embeddings = get<int64_t>(values, "model.max_position_embeddings");
  m.decoder_seq_length = get<int64_t>(values, "model.decoder_seq_length");
  m.num_decoder_layers = get<int64_t>(values, "model.num_decoder_layers");
  m.kv_channels = get<int64_t>(values, "model.kv_channels");
  m.relative_attention_num_buckets = get<int64_t>(values, "model.relative_attention_num_buckets");
  m.relative_attention_max_distance = get<int64_t>(values, "model.relative_attention_max_distance");
  m.position_embedding_type = get<std::string>(values, "model.position_embedding_type");
  m.normalization = get<std::string>(values, "model.normalization");
  m.activation = get<std::string>(values, "model.activation");
  m.untie_embeddings_and_output_weights = get<bool>(values, "model.untie_embeddings_and_output_weights");
  m.rotary_base = get<double>(values, "model.rotary_base");
  m.rotary_percent = get<double>(values, "model.rotary_percent");
  m.rotary_interleaved = get<bool>(values, "model.rotary_interleaved");
  m.add_bias_linear = get<bool>(values, "model.add_bias_linear");
  m.attention_head_type = get<std::string>(values, "model.attention_head_type");
  m.norm_epsilon = get<double>(values, "model.norm_epsilon");
  m.make_vocab_size_divisible_by = get<int64_t>(values, "model.make_vocab_size_divisible_by");
  m.hidden_dropout = get<double>(values, "model.hidden_dropout");
  m.attention_dropout = get<double>(values, "model.attention_dropout");
  m.layernorm_epsilon = get<double>(values, "model.layernorm_epsilon");
  m.init_method_std = get<double>(values, "model.init_method_std");
  m.num_experts = get<int64_t>(values, "model.num_experts");
  m.moe_router_topk = get<int64_t>(values, "model.moe_router_topk");
  m.moe_ffn_hidden_size = get<int64_t>(values, "model.moe_ffn_hidden_size");
  m.moe_router_load_balancing_type = get<std::string>(values, "model.moe_router_load_balancing_type");
  m.moe_aux_loss_coeff = get<double>(values, "model.moe_aux_loss_coeff");
  m.moe_z_loss_coeff = get<double>(values, "model.moe_z_loss_coeff");
  m.moe_router_score_function = get<std::string>(values, "model.moe_router_score_function");
  m.moe_router_pre_softmax = get<bool>(values, "model.moe_router_pre_softmax");
  m.moe_expert_capacity_factor = get<double>(values, "model.moe_expert_capacity_factor");
  m.moe_pad_expert_input_to_capacity = get<bool>(values, "model.moe_pad_expert_input_to_capacity");
  m.moe_shared_expert_intermediate_size = get<int64_t>(values, "model.moe_shared_expert_intermediate_size");
  m.moe_layer_freq = get<int64_t>(values, "model.moe_layer_freq");

  auto& p = config.parallel;
  p.tensor_model_parallel_size = get<int64_t>(values, "parallel.tensor_model_parallel_size");
  p.pipeline_model_parallel_size = get<int64_t>(values, "parallel.pipeline_model_parallel_size");
  p.num_layers_per_virtual_pipeline_stage = get<int64_t>(values, "parallel.num_layers_per_virtual_pipeline_stage");
  p.pipeline_layer_split = get<std::string>(values, "parallel.pipeline_layer_split");
  p.sequence_parallel = get<bool>(values, "parallel.sequence_parallel");
  p.expert_model_parallel_size = get<int64_t>(values, "parallel.expert_model_parallel_size");
  p.use_distributed_optimizer = get<bool>(values, "parallel.use_distributed_optimizer");
  p.recompute_granularity = get<std::string>(values, "parallel.recompute_granularity");
  p.recompute_method = get<std::string>(values, "parallel.recompute_method");
  p.recompute_num_layers = get<int64_t>(values, "parallel.recompute_num_layers");

  auto& t = config.training;
  t.micro_batch_size = get<int64_t>(values, "training.micro_batch_size");
  t.global_batch_size = get<int64_t>(values, "training.global_batch_size");
  t.train_iters = get<int64_t>(values, "training.train_iters");
  t.precision = get<std::string>(values, "training.precision");
  t.precision_defaulted = precision_defaulted;
  t.seed = get<int64_t>(values, "training.seed");
  t.eval_interval = get<int64_t>(values, "training.eval_interval");
  t.eval_iters = get<int64_t>(values, "training.eval_iters");
  t.device = get<std::string>(values, "training.device");
  t.peak_tflops_per_device = get<double>(values, "training.peak_tflops_per_device");
  t.deterministic_mode = get<bool>(values, "training.deterministic_mode");
  t.loss = get<std::string>(values, "training.loss");
  t.loss_params = resolve_loss_params(t.loss, values, src);

  auto& o = config.optimizer;
  o.optimizer = get<std::string>(values, "optimizer.optimizer");
  o.lr = get<double>(values, "optimizer.lr");
  o.min_lr = get<double>(values, "optimizer.min_lr");
  o.lr_decay_style = get<std::string>(values, "optimizer.lr_decay_style");
  o.lr_warmup_iters = get<int64_t>(values, "optimizer.lr_warmup_iters");
  o.lr_decay_iters = get<int64_t>(values, "optimizer.lr_decay_iters");
  o.lr_wsd_decay_iters = get<int64_t>(values, "optimizer.lr_wsd_decay_iters");
  o.lr_wsd_decay_style = get<std::string>(values, "optimizer.lr_wsd_decay_style");
  o.weight_decay = get<double>(values, "optimizer.weight_decay");
  o.adam_beta1 = get<double>(values, "optimizer.adam_beta1");
  o.adam_beta2 = get<double>(values, "optimizer.adam_beta2");
  o.adam_eps = get<double>(values, "optimizer.adam_eps");
  o.clip_grad = get<double>(values, "optimizer.clip_grad");

  std::string config_dir = path.empty() ? std::string() : fs::path(path).parent_path().string();
  auto& d = config.data;
  d.data_path = get<std::vector<DataPathEntry>>(values, "data.data_path");
  for (auto& entry : d.data_path)
    if (auto* prefix = std::get_if<std::string>(&entry)) *prefix = resolve_path(*prefix, config_dir);
  d.split = get<std::string>(values, "data.split");
  d.tokenizer_type = get<std::string>(values, "data.tokenizer_type");
  d.vocab_file = resolve_path(get<std::string>(values, "data.vocab_file"), config_dir);
  d.merge_file = resolve_path(get<std::string>(values, "data.merge_file"), config_dir);
  d.mock_data = get<bool>(values, "data.mock_data");
  d.vocab_size = get<int64_t>(values, "data.vocab_size");
  d.data_cache_path = get<std::string>(values, "data.data_cache_path");
  d.eod_mask_loss = get<bool>(values, "data.eod_mask_loss");
  d.reset_position_ids = get<bool>(values, "data.reset_position_ids");
  d.reset_attention_mask = get<bool>(values, "data.reset_attention_mask");
  d.tokenizer_model = resolve_path(get<std::string>(values, "data.tokenizer_model"), config_dir);
  d.vocab_extra_ids = get<int64_t>(values, "data.vocab_extra_ids");
  if (d.vocab_extra_ids < 0) d.vocab_extra_ids = m.architecture == "t5" ? 100 : 0;
  d.mask_prob = get<double>(values, "data.mask_prob");
  d.short_seq_prob = get<double>(values, "data.short_seq_prob");

  auto& c = config.checkpoint;
  c.save = get<std::string>(values, "checkpoint.save");
  c.load = get<std::string>(values, "checkpoint.load");
  c.save_interval = get<int64_t>(values, "checkpoint.save_interval");
  c.no_load_optim = get<bool>(values, "checkpoint.no_load_optim");
  c.no_load_rng = get<bool>(values, "checkpoint.no_load_rng");
  c.finetune = get<bool>(values, "checkpoint.finetune");

  config.logging.log_interval = get<int64_t>(values, "logging.log_interval");
  config.logging.metrics_file = get<std::string>(values, "logging.metrics_file");
  config.logging.tensorboard_dir = get<std::string>(values, "logging.tensorboard_dir");

  // Derived defaults.
  require(m.attention_head_type == "multihead" || m.attention_head_type == "multiquery", src,
          "model.attention_head_type = \"" + m.attention_head_type + "\" is not allowed; allowed: multihead, multiquery");
  if (m.attention_head_type == "multiquery") {
    require(m.num_query_groups == 0 || m.num_query_groups == 1, src,
            "model.attention_head_type = \"multiquery\" means model.num_query_groups = 1, but num_query_groups = " +
                std::to_string(m.num_query_groups) + "; drop one of the two keys");
    m.num_query_groups = 1;
  }
  if (m.num_query_groups == 0) m.num_query_groups = m.num_attention_heads;
  require(m.norm_epsilon >= 0, src, "model.norm_epsilon = " + format_value(m.norm_epsilon) +
                                        " must be >= 0 (0: model.layernorm_epsilon)");
  if (m.norm_epsilon > 0) m.layernorm_epsilon = m.norm_epsilon;
  if (m.ffn_hidden_size == 0) m.ffn_hidden_size = 4 * m.hidden_size;
  if (o.lr_decay_iters == 0) o.lr_decay_iters = t.train_iters;
  p.distributed_timeout_minutes = get<double>(values, "parallel.distributed_timeout_minutes");
  validate_config(config, src);

  // Rules that need no world size.
  auto positive = [&](int64_t v, const char* key) {
    require(v > 0, src, std::string(key) + " = " + std::to_string(v) + " must be positive");
  };
  positive(m.num_layers, "model.num_layers");
  positive(m.hidden_size, "model.hidden_size");
  positive(m.num_attention_heads, "model.num_attention_heads");
  positive(m.seq_length, "model.seq_length");
  positive(m.max_position_embeddings, "model.max_position_embeddings");
  positive(m.make_vocab_size_divisible_by, "model.make_vocab_size_divisible_by");
  positive(t.micro_batch_size, "training.micro_batch_size");
  positive(t.global_batch_size, "training.global_batch_size");
  positive(t.train_iters, "training.train_iters");
  positive(config.logging.log_interval, "logging.log_interval");
  require(m.hidden_size % m.num_attention_heads == 0, src,
          "model.hidden_size = " + std::to_string(m.hidden_size) + " is not divisible by model.num_attention_heads = " +
              std::to_string(m.num_attention_heads) + "; choose a hidden size that is a multiple of the head count");
  require(m.num_query_groups > 0 && m.num_attention_heads % m.num_query_groups == 0, src,
          "model.num_query_groups = " + std::to_string(m.num_query_groups) +
              " must divide model.num_attention_heads = " + std::to_string(m.num_attention_heads));
  require(m.seq_length <= m.max_position_embeddings, src,
          "model.seq_length = " + std::to_string(m.seq_length) + " is above model.max_position_embeddings = " +
              std::to_string(m.max_position_embeddings) + "; raise max_position_embeddings or shorten seq_length");
  require(t.global_batch_size % t.micro_batch_size == 0, src,
          "training.global_batch_size = " + std::to_string(t.global_batch_size) +
              " is not a multiple of training.micro_batch_size = " + std::to_string(t.micro_batch_size));
  for (auto [v, key] : {std::pair{m.hidden_dropout, "model.hidden_dropout"},
                        std::pair{m.attention_dropout, "model.attention_dropout"}})
    require(v >= 0.0 && v < 1.0, src, std::string(key) + " must be in [0, 1)");
  require(m.layernorm_epsilon > 0, src, "model.layernorm_epsilon must be positive");
  require(m.rotary_percent > 0 && m.rotary_percent <= 1, src,
          "model.rotary_percent = " + format_value(m.rotary_percent) + " must be in (0, 1]");
  require(m.rotary_base > 0, src, "model.rotary_base = " + format_value(m.rotary_base) + " must be positive");
  if (m.position_embedding_type == "rope")
    require(m.rotary_dim() >= 2, src,
            "model.rotary_percent = " + format_value(m.rotary_percent) + " x head dim (model.hidden_size / " +
                "model.num_attention_heads = " + std::to_string(m.head_dim()) +
                ") rotates fewer than 2 dims; raise rotary_percent");
  check_moe_keys(m, p, t, src);
  require(o.lr >= 0 && o.min_lr >= 0 && o.min_lr <= o.lr, src,
          "optimizer.min_lr must be in [0, optimizer.lr]; got lr = " + format_value(o.lr) +
              ", min_lr = " + format_value(o.min_lr));
  require(o.clip_grad >= 0, src, "optimizer.clip_grad must be >= 0 (0 disables clipping)");
  require(t.eval_interval >= 0 && t.eval_iters >= 0, src, "training.eval_interval and eval_iters must be >= 0");
  try {  // the recompute keys (their fit to each pipeline stage's layers: train::recompute_config)
    nn::check_recompute_layers(
        nn::parse_recompute_config(p.recompute_granularity, p.recompute_method, p.recompute_num_layers), m.num_layers,
        "the model (model.num_layers = " + std::to_string(m.num_layers) + ")");
  } catch (const ConfigError& e) {
    TESSERA_CONFIG_FAIL(src.of_message(e.message()), e.message());
  }

  // Data: mock tokens need a vocabulary size; real data needs its files.
  if (d.mock_data) {
    require(d.vocab_size > 0 || !d.vocab_file.empty(), src,
            "data.mock_data = true needs data.vocab_size > 0 (or a tokenizer vocab_file)");
  } else {
    require(!d.data_path.empty(), src,
            "data.data_path is empty; give dataset prefixes (made by tessera-preprocess) or set data.mock_data = true");
    for (const auto& entry : d.data_path) {
      if (auto* prefix = std::get_if<std::string>(&entry)) {
        for (const char* ext : {".bin", ".idx"})
          require(path_exists(*prefix + ext), src,
                  "data.data_path: data file '" + *prefix + ext + "' does not exist (prefix '" + *prefix +
                      "'; make it with tessera-preprocess)");
      }
    }
  }
  require(d.mask_prob > 0 && d.mask_prob < 1, src, "data.mask_prob = " + std::to_string(d.mask_prob) + " must be in (0, 1)");
  require(d.short_seq_prob >= 0 && d.short_seq_prob <= 1, src,
          "data.short_seq_prob = " + std::to_string(d.short_seq_prob) + " must be in [0, 1]");
  require(d.vocab_extra_ids >= 0, src, "data.vocab_extra_ids must be >= 0 (or -1: the architecture's default)");
  if (d.tokenizer_type == "SentencePieceTokenizer" && !d.mock_data)
    require(!d.tokenizer_model.empty() && path_exists(d.tokenizer_model), src,
            "data.tokenizer_model '" + d.tokenizer_model + "' does not exist (SentencePieceTokenizer needs the .model file)");
  if (d.tokenizer_type == "GPT2BPETokenizer" && !d.mock_data) {
    require(!d.vocab_file.empty() && path_exists(d.vocab_file), src,
            "data.vocab_file '" + d.vocab_file + "' does not exist (GPT2BPETokenizer needs vocab.json)");
    require(!d.merge_file.empty() && path_exists(d.merge_file), src,
            "data.merge_file '" + d.merge_file + "' does not exist (GPT2BPETokenizer needs merges.txt)");
  }
  if (!config.logging.metrics_file.empty()) {
    fs::path parent = fs::path(config.logging.metrics_file).parent_path();
    require(parent.empty() || is_directory_path(parent), src,
            "logging.metrics_file: folder '" + parent.string() + "' does not exist");
  }
  const std::vector<std::string> styles = {"constant", "linear", "cosine", "inverse-square-root", "wsd"};
  require(std::find(styles.begin(), styles.end(), o.lr_decay_style) != styles.end(), src,
          "optimizer.lr_decay_style = \"" + o.lr_decay_style +
              "\" is not allowed; allowed: constant, linear, cosine, inverse-square-root, wsd");
  const std::vector<std::string> wsd_styles = {"exponential", "linear", "cosine", "minus_sqrt"};
  require(std::find(wsd_styles.begin(), wsd_styles.end(), o.lr_wsd_decay_style) != wsd_styles.end(), src,
          "optimizer.lr_wsd_decay_style = \"" + o.lr_wsd_decay_style +
              "\" is not allowed; allowed: exponential, linear, cosine, minus_sqrt");
  const std::vector<std::string> devices = {"auto", "cpu", "cuda"};
  require(std::find(devices.begin(), devices.end(), t.device) != devices.end(), src,
          "training.device = \"" + t.device + "\" is not allowed; allowed: auto, cpu, cuda");
  return config;
}

void resolve_default_precision(Config& config, bool cuda) {
  if (!config.training.precision_defaulted || cuda) return;
  config.training.precision = "fp32";
  config.values["training.precision"] = std::string("fp32");
  config.training.precision_defaulted = false;
  log::info("training.precision: fp32 on this CPU-only run (the default, bf16, applies on GPUs; set "
            "training.precision to choose)");
}

void validate_for_world(const Config& config, int world_size) {
  const auto& p = config.parallel;
  int64_t model_parallel = p.tensor_model_parallel_size * p.pipeline_model_parallel_size;
  if (world_size % model_parallel != 0)
    TESSERA_CONFIG_FAIL("world size ", world_size, " is not divisible by parallel.tensor_model_parallel_size (",
                        p.tensor_model_parallel_size, ") x parallel.pipeline_model_parallel_size (",
                        p.pipeline_model_parallel_size, ")");
  int64_t dp = world_size / model_parallel;
  const auto& t = config.training;
  if (t.global_batch_size % (t.micro_batch_size * dp) != 0)
    TESSERA_CONFIG_FAIL("training.global_batch_size = ", t.global_batch_size,
                        " is not a multiple of training.micro_batch_size (", t.micro_batch_size,
                        ") x data-parallel size (", dp, ")");
}

std::string Config::to_toml() const {
  std::ostringstream out;
  std::string current;
  for (const auto& spec : config_schema()) {
    if (spec.section != current) {
      current = spec.section;
      out << (out.tellp() > 0 ? "\n" : "") << "[" << current << "]\n";
    }
    std::string dotted = std::string(spec.section) + "." + std::string(spec.key);
    out << spec.key << " = " << format_value(values.at(dotted)) << "\n";
  }
  return out.str();
}

}  // namespace tessera::train
