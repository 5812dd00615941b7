#include "tessera/train/config_validation.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>

#include "tessera/core/error.h"
#include "tessera/data/gpt_dataset_split.h"
#include "tessera/train/config.h"

namespace tessera::train {

namespace fs = std::filesystem;

ConfigOrigin::ConfigOrigin(std::string config_path, std::vector<std::string> overrides)
    : path_(std::move(config_path)), overrides_(std::move(overrides)) {}

std::string ConfigOrigin::of_key(const std::string& dotted_key) const {
  for (auto it = overrides_.rbegin(); it != overrides_.rend(); ++it)  // the last --set wins
    if (it->rfind(dotted_key + "=", 0) == 0) return "--set " + *it + ": ";
  return path_.empty() ? std::string() : path_ + ": ";
}

std::string ConfigOrigin::of_message(const std::string& message) const {
  size_t end = 0;
  while (end < message.size() && (std::isalnum(static_cast<unsigned char>(message[end])) || message[end] == '_' ||
                                  message[end] == '.'))
    ++end;
  std::string word = message.substr(0, end);
  auto dot = word.find('.');
  if (dot != std::string::npos && find_key(word.substr(0, dot), word.substr(dot + 1))) return of_key(word);
  return path_.empty() ? std::string() : path_ + ": ";
}

std::string key_suggestion(const std::string& dotted_key) {
  std::string best = closest_key(dotted_key);
  auto dot = dotted_key.find('.');
  std::string section = dot == std::string::npos ? std::string() : dotted_key.substr(0, dot);
  std::string bare = dot == std::string::npos ? dotted_key : dotted_key.substr(dot + 1);
  std::string best_bare = best.substr(best.find('.') + 1);
  // A suggestion must share most of the name: at least half of the longer one's characters in
  // common (as a prefix, suffix or after a few edits); else it only confuses.
  size_t common_prefix = 0;
  while (common_prefix < bare.size() && common_prefix < best_bare.size() && bare[common_prefix] == best_bare[common_prefix])
    ++common_prefix;
  size_t common_suffix = 0;
  while (common_suffix < bare.size() && common_suffix < best_bare.size() &&
         bare[bare.size() - 1 - common_suffix] == best_bare[best_bare.size() - 1 - common_suffix])
    ++common_suffix;
  size_t longer = std::max(bare.size(), best_bare.size());
  bool close = 2 * std::max(common_prefix, common_suffix) >= longer || 2 * (common_prefix + common_suffix) >= longer + 2;
  if (close) return "did you mean '" + best + "'?";
  bool known_section = false;
  for (const auto& spec : config_schema()) known_section |= spec.section == section;
  if (known_section) return "no similar key; tessera-train --help lists the keys of [" + section + "]";
  return "no similar key; tessera-train --help lists every key";
}

namespace {

constexpr int64_t kMaxDimension = std::numeric_limits<int32_t>::max();
// No tensor of a model this code can train has more elements; above it, sizes are typos (and
// byte counts of optimizer state would overflow 64 bits well before).
constexpr int64_t kMaxElements = int64_t{1} << 48;

class Validator {
 public:
  Validator(const Config& config, const ConfigOrigin& origin) : config_(config), origin_(origin) {}

  template <typename... Args>
  [[noreturn]] void fail(const std::string& key, const Args&... args) const {
    TESSERA_CONFIG_FAIL(origin_.of_key(key), key, " = ", format_value(config_.values.at(key)), " ", args...);
  }
  int64_t integer(const std::string& key) const { return std::get<int64_t>(config_.values.at(key)); }
  double number(const std::string& key) const { return std::get<double>(config_.values.at(key)); }
  const std::string& text(const std::string& key) const { return std::get<std::string>(config_.values.at(key)); }
  bool flag(const std::string& key) const { return std::get<bool>(config_.values.at(key)); }

  void at_least(const std::string& key, int64_t low, const char* meaning) const {
    if (integer(key) < low) fail(key, "must be >= ", low, meaning);
  }
  void at_most(const std::string& key, int64_t high) const {
    if (integer(key) > high) fail(key, "is too large (at most ", high, ")");
  }
  void finite(const std::string& key) const {
    if (!std::isfinite(number(key))) fail(key, "must be a finite number");
  }
  // low <= v (< high when open, <= high otherwise).
  void in_range(const std::string& key, double low, double high, bool open_high, const char* shown) const {
    double v = number(key);
    if (!(v >= low && (open_high ? v < high : v <= high))) fail(key, "must be in ", shown);
  }

  // a * b * ... as elements of one tensor; the first key names the error.
  void product_fits(const std::string& key, std::initializer_list<int64_t> factors, const char* what) const {
    __int128 p = 1;
    for (int64_t f : factors) {
      if (f <= 0) return;  // non-positive sizes are reported by their own rules
      p *= f;
      if (p > kMaxElements)
        fail(key, "makes ", what, " larger than 2^48 elements; check the model and batch sizes");
    }
  }

 private:
  const Config& config_;
  const ConfigOrigin& origin_;
};

void check_path_writable(const Validator& v, const std::string& key, const std::string& path) {
  if (path.empty()) return;
  fs::path p(path);
  std::error_code ec;
  if (fs::exists(p, ec)) {
    if (!fs::is_directory(p, ec)) v.fail(key, "is not a folder (a file of that name exists)");
    if (::access(p.c_str(), W_OK | X_OK) != 0) v.fail(key, "is a folder this process cannot write to");
    return;
  }
  // Not there yet: the nearest existing parent must be a writable folder.
  fs::path parent = fs::absolute(p, ec).parent_path();
  while (!parent.empty() && !fs::exists(parent, ec) && parent != parent.root_path()) parent = parent.parent_path();
  if (!fs::is_directory(parent, ec)) v.fail(key, "cannot be created: '", parent.string(), "' is not a folder");
  if (::access(parent.c_str(), W_OK | X_OK) != 0)
    v.fail(key, "cannot be created: folder '", parent.string(), "' is not writable");
}

}  // namespace

void validate_config(const Config& config, const ConfigOrigin& origin) {
  Validator v(config, origin);
  // Every number is finite.
  for (const auto& spec : config_schema())
    if (spec.type == ValueType::floating) v.finite(std::string(spec.section) + "." + std::string(spec.key));

  // Sizes: non-negative where 0 has a meaning, positive elsewhere (load_config), and in int32 range.
  for (const char* key : {"model.num_layers", "model.hidden_size", "model.num_attention_heads", "model.num_query_groups",
                          "model.ffn_hidden_size", "model.seq_length", "model.max_position_embeddings",
                          "model.make_vocab_size_divisible_by", "data.vocab_size", "training.micro_batch_size",
                          "training.global_batch_size", "parallel.tensor_model_parallel_size",
                          "parallel.pipeline_model_parallel_size", "parallel.num_layers_per_virtual_pipeline_stage"})
    v.at_most(key, kMaxDimension);
  v.at_least("model.ffn_hidden_size", 0, " (0 = 4 x hidden_size)");
  v.at_least("model.num_query_groups", 0, " (0 = num_attention_heads)");
  v.at_least("data.vocab_size", 0, " (0: from the tokenizer)");
  v.at_least("parallel.tensor_model_parallel_size", 1, "");
  v.at_least("parallel.pipeline_model_parallel_size", 1, "");
  v.at_least("parallel.num_layers_per_virtual_pipeline_stage", 0, " (0: no interleaving)");
  for (const char* key : {"checkpoint.keep_last_n", "checkpoint.save_interval", "training.exit_interval",
                          "training.exit_duration_in_mins", "optimizer.lr_warmup_iters", "optimizer.lr_decay_iters",
                          "optimizer.lr_wsd_decay_iters", "training.eval_interval", "training.eval_iters"})
    v.at_least(key, 0, " (0 disables it or takes the default)");

  const auto& m = config.model;
  const auto& t = config.training;
  int64_t vocab = std::max<int64_t>(config.data.vocab_size, 1) + m.make_vocab_size_divisible_by;
  v.product_fits("model.hidden_size", {vocab, m.hidden_size}, "the word embedding table");
  v.product_fits("model.max_position_embeddings", {m.max_position_embeddings, m.hidden_size},
                 "the position embedding table");
  v.product_fits("model.ffn_hidden_size", {m.ffn_hidden_size, m.hidden_size, m.num_layers}, "the MLP weights");
  v.product_fits("model.hidden_size", {3, m.hidden_size, m.hidden_size, m.num_layers}, "the attention weights");
  v.product_fits("model.seq_length", {t.micro_batch_size, m.seq_length, vocab}, "the logits of a micro-batch");
  v.product_fits("model.seq_length", {t.micro_batch_size, m.seq_length, m.seq_length, m.num_attention_heads},
                 "the attention scores of a micro-batch");
  v.product_fits("model.ffn_hidden_size", {t.micro_batch_size, m.seq_length, m.ffn_hidden_size},
                 "the MLP activations of a micro-batch");
  if (t.train_iters > 0 && t.global_batch_size > 0 &&
      static_cast<__int128>(t.train_iters) * t.global_batch_size > (int64_t{1} << 62))
    v.fail("training.train_iters", "x training.global_batch_size overflows the sample counter");

  // Numbers with a range.
  if (!(m.init_method_std > 0)) v.fail("model.init_method_std", "must be positive");
  v.in_range("optimizer.lr", 0, std::numeric_limits<double>::max(), false, "[0, inf)");
  v.in_range("optimizer.min_lr", 0, std::numeric_limits<double>::max(), false, "[0, optimizer.lr]");
  v.in_range("optimizer.adam_beta1", 0, 1, true, "[0, 1)");
  v.in_range("optimizer.adam_beta2", 0, 1, true, "[0, 1)");
  if (!(config.optimizer.adam_eps > 0)) v.fail("optimizer.adam_eps", "must be positive");
  v.in_range("optimizer.weight_decay", 0, std::numeric_limits<double>::max(), false, "[0, inf)");
  v.in_range("training.peak_tflops_per_device", 0, std::numeric_limits<double>::max(), false,
             "[0, inf) (0: the default peak)");
  if (config.values.count("parallel.distributed_timeout_minutes"))
    v.in_range("parallel.distributed_timeout_minutes", 0, std::numeric_limits<double>::max(), false,
               "[0, inf) (0: wait forever)");

  // Strings with a grammar.
  try {
    data::parse_split(config.data.split, "data.split");
  } catch (const ConfigError& e) {
    TESSERA_CONFIG_FAIL(origin.of_key("data.split"), e.message());
  }

  // Checkpoint paths: found unusable now, not after hours of training.
  const auto& c = config.checkpoint;
  const std::string& hf = v.text("checkpoint.pretrained_hf");
  if (c.finetune && c.load.empty() && hf.empty())
    v.fail("checkpoint.finetune", "needs checkpoint.load (the checkpoint whose weights to start from) or "
                                  "checkpoint.pretrained_hf");
  if (!hf.empty()) {
    std::error_code hf_ec;
    if (!fs::is_directory(hf, hf_ec))
      v.fail("checkpoint.pretrained_hf", "is not a folder (a Hugging Face model folder holding config.json and "
                                         "*.safetensors)");
    if (!fs::is_regular_file(fs::path(hf) / "config.json", hf_ec))
      v.fail("checkpoint.pretrained_hf", "has no config.json (a Hugging Face model folder holding config.json and "
                                         "*.safetensors)");
    if (c.save.empty())
      v.fail("checkpoint.pretrained_hf", "needs checkpoint.save (the imported weights are written to "
                                         "<save>/pretrained_hf)");
  }
  std::error_code ec;
  if (!c.load.empty() && fs::exists(c.load, ec) && !fs::is_directory(c.load, ec))
    v.fail("checkpoint.load", "is a file; give the checkpoint folder (holding latest_checkpointed_iteration.txt) "
                              "or one of its iter_XXXXXXX folders");
  check_path_writable(v, "checkpoint.save", c.save);
  check_path_writable(v, "logging.tensorboard_dir", config.logging.tensorboard_dir);
}

}  // namespace tessera::train
