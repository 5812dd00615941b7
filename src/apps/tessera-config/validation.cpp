#include "validation.h"

#include <filesystem>

#include "tessera/core/error.h"
#include "tessera/train/config.h"

namespace tessera::config_app {

namespace fs = std::filesystem;
using std::to_string;

namespace {
int64_t derived(int64_t value, int64_t fallback) { return value > 0 ? value : fallback; }
}  // namespace

std::string check_tensor_parallel(const Session& s, int64_t tp) {
  if (tp < 1) return "the tensor-parallel size must be at least 1";
  int64_t heads = s.integer("model.num_attention_heads");
  int64_t groups = derived(s.integer("model.num_query_groups"), heads);
  int64_t ffn = derived(s.integer("model.ffn_hidden_size"), 4 * s.integer("model.hidden_size"));
  if (heads % tp != 0) return "TP = " + to_string(tp) + " does not divide the " + to_string(heads) + " attention heads";
  if (groups % tp != 0) return "TP = " + to_string(tp) + " does not divide the " + to_string(groups) + " query groups";
  if (ffn % tp != 0) return "TP = " + to_string(tp) + " does not divide ffn_hidden_size = " + to_string(ffn);
  if (s.world_size() % tp != 0)
    return "TP = " + to_string(tp) + " does not divide the world size " + to_string(s.world_size()) + " (" +
           to_string(s.nodes) + " node(s) x " + to_string(s.ranks_per_node()) + " rank(s))";
  return "";
}

std::string check_sequence_parallel(const Session& s, int64_t tp) {
  int64_t seq = s.integer("model.seq_length");
  if (seq % tp != 0) return "seq_length = " + to_string(seq) + " is not divisible by TP = " + to_string(tp);
  return "";
}

std::string check_pipeline_parallel(const Session& s, int64_t pp) {
  if (pp < 1) return "the pipeline-parallel size must be at least 1";
  int64_t tp = s.integer("parallel.tensor_model_parallel_size");
  int64_t layers = s.integer("model.num_layers");
  if (s.world_size() % (tp * pp) != 0)
    return "world size " + to_string(s.world_size()) + " is not divisible by TP x PP = " + to_string(tp) + " x " +
           to_string(pp) + " (world size = TP x PP x DP)";
  if (s.string("parallel.pipeline_layer_split").empty() && layers % pp != 0)
    return "PP = " + to_string(pp) + " does not divide the " + to_string(layers) + " layers";
  return "";
}

std::string check_prefix(const std::string& prefix) {
  for (const char* ext : {".bin", ".idx"})
    if (!fs::is_regular_file(prefix + ext))
      return "'" + prefix + ext + "' does not exist (a dataset prefix made by tessera-preprocess, or 'mock')";
  return "";
}

std::string check_file(const std::string& path) {
  if (!fs::is_regular_file(path)) return "'" + path + "' is not an existing file";
  return "";
}

std::vector<std::string> unsupported_notes(const Session& s) {
  std::vector<std::string> notes;
  for (const auto& spec : train::config_schema()) {
    std::string key = std::string(spec.section) + "." + std::string(spec.key);
    if (train::is_supported(spec, s.values.at(key)) || spec.unsupported_reason.empty()) continue;
    notes.push_back(key + " = " + train::format_value(s.values.at(key)) + " is not supported yet (it comes with " +
                    std::string(spec.unsupported_reason) + "); tessera-train rejects this config until then");
  }
  return notes;
}

void check_whole(const Session& s, const std::string& file) {
  std::vector<std::string> defaults_for_unsupported;
  for (const auto& spec : train::config_schema()) {
    std::string key = std::string(spec.section) + "." + std::string(spec.key);
    if (!train::is_supported(spec, s.values.at(key)))
      defaults_for_unsupported.push_back(key + "=" + train::format_value(spec.default_value));
  }
  train::Config config = train::load_config(file, defaults_for_unsupported);
  train::validate_for_world(config, static_cast<int>(s.world_size()));
  const auto& p = config.parallel;
  if (std::string reason = check_tensor_parallel(s, p.tensor_model_parallel_size); !reason.empty())
    TESSERA_CONFIG_FAIL(file, ": parallel.tensor_model_parallel_size: ", reason);
  if (std::string reason = check_pipeline_parallel(s, p.pipeline_model_parallel_size); !reason.empty())
    TESSERA_CONFIG_FAIL(file, ": parallel.pipeline_model_parallel_size: ", reason);
  if (s.boolean("parallel.sequence_parallel")) {
    int64_t tp = s.integer("parallel.tensor_model_parallel_size");
    if (tp == 1) TESSERA_CONFIG_FAIL(file, ": parallel.sequence_parallel = true needs parallel.tensor_model_parallel_size > 1");
    if (std::string reason = check_sequence_parallel(s, tp); !reason.empty())
      TESSERA_CONFIG_FAIL(file, ": parallel.sequence_parallel: ", reason);
  }
}

}  // namespace tessera::config_app
