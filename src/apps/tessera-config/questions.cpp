#include "questions.h"

#include <algorithm>
#include <filesystem>

#include "tessera/core/error.h"
#include "tessera/train/config.h"
#include "validation.h"

namespace tessera::config_app {

namespace fs = std::filesystem;
using train::ConfigValue;
using train::DataPathEntry;

namespace {

struct ModelPreset {
  const char* name;
  int64_t layers, hidden, heads, seq;
};
// GPT-2 family shapes (Megatron's examples) plus a tiny one for smoke tests on a CPU.
const ModelPreset kPresets[] = {{"tiny", 2, 64, 4, 128},      {"gpt2-124m", 12, 768, 12, 1024},
                                {"gpt2-350m", 24, 1024, 16, 1024}, {"gpt2-760m", 24, 1536, 16, 1024},
                                {"gpt2-1.5b", 48, 1600, 25, 1024}};

const train::KeySpec& spec_of(const std::string& key) {
  auto dot = key.find('.');
  const train::KeySpec* spec = train::find_key(key.substr(0, dot), key.substr(dot + 1));
  if (!spec) TESSERA_FAIL("tessera-config: no config key ", key);
  return *spec;
}

bool always(const Session&) { return true; }

std::string shown(const ConfigValue& value) {  // a value as typed at the prompt
  if (auto* b = std::get_if<bool>(&value)) return *b ? "yes" : "no";
  if (auto* s = std::get_if<std::string>(&value)) return s->empty() ? "none" : *s;
  return train::format_value(value);
}

std::optional<bool> yes_no(std::string answer) {
  std::transform(answer.begin(), answer.end(), answer.begin(), ::tolower);
  if (answer == "y" || answer == "yes" || answer == "true") return true;
  if (answer == "n" || answer == "no" || answer == "false") return false;
  return std::nullopt;
}

std::optional<int64_t> integer(const std::string& answer) {
  try {
    size_t used = 0;
    int64_t v = std::stoll(answer, &used);
    if (used == answer.size()) return v;
  } catch (const std::exception&) {
  }
  return std::nullopt;
}

std::string absolute(const std::string& path) { return path.empty() ? path : fs::absolute(path).lexically_normal().string(); }

// The choices of a string key, unsupported ones marked: "gpt | bert* | t5* (*: not supported yet)".
std::string choices_text(const train::KeySpec& spec) {
  std::string text;
  bool marked = false;
  for (const auto& choice : train::allowed_choices(spec)) {
    bool ok = train::is_supported(spec, ConfigValue(choice));
    marked |= !ok;
    text += (text.empty() ? "" : " | ") + choice + (ok ? "" : "*");
  }
  return text + (marked ? " (*: not supported yet by tessera-train)" : "");
}

// A question that sets one config key. `check` adds rules beyond the key's type and choices.
Question key_question(const std::string& key, std::string prompt, std::function<bool(const Session&)> applies = always,
                      std::function<std::string(const Session&, const ConfigValue&)> check = nullptr) {
  const train::KeySpec& spec = spec_of(key);
  if (!train::allowed_choices(spec).empty()) prompt += " (" + choices_text(spec) + ")";
  else if (spec.type == train::ValueType::boolean) prompt += " (yes/no)";
  return {prompt, std::move(applies), [key](const Session& s) { return shown(s.values.at(key)); },
          [key, check, spec_ptr = &spec](Session& s, const std::string& answer) -> std::string {
            const train::KeySpec& spec = *spec_ptr;
            ConfigValue value;
            if (spec.type == train::ValueType::boolean) {
              auto b = yes_no(answer);
              if (!b) return "answer yes or no";
              value = *b;
            } else if (spec.type == train::ValueType::string && answer == "none" && train::allowed_choices(spec).empty()) {
              value = std::string();
            } else {
              try {
                value = train::parse_value_text(spec, answer, "");
              } catch (const ConfigError& e) {
                return e.message();
              }
            }
            auto choices = train::allowed_choices(spec);
            if (!choices.empty() && std::find(choices.begin(), choices.end(), std::get<std::string>(value)) == choices.end())
              return "'" + answer + "' is not one of " + choices_text(spec);
            if (check)
              if (std::string reason = check(s, value); !reason.empty()) return reason;
            s.values[key] = value;  // a value not supported yet is kept; run_questionnaire says so
            return std::string();
          }};
}

std::string model_size_default(const Session& s) {
  for (const auto& p : kPresets)
    if (s.integer("model.num_layers") == p.layers && s.integer("model.hidden_size") == p.hidden &&
        s.integer("model.num_attention_heads") == p.heads && s.integer("model.seq_length") == p.seq)
      return p.name;
  return "custom";
}

Question model_size_question() {
  std::string names;
  for (const auto& p : kPresets) names += std::string(names.empty() ? "" : " | ") + p.name;
  return {"Model size (" + names + " | custom: keep layers/hidden/heads as they are)", always, model_size_default,
          [](Session& s, const std::string& answer) -> std::string {
            if (answer == "custom") return "";
            for (const auto& p : kPresets)
              if (answer == p.name) {
                s.values["model.num_layers"] = p.layers;
                s.values["model.hidden_size"] = p.hidden;
                s.values["model.num_attention_heads"] = p.heads;
                s.values["model.num_query_groups"] = int64_t{0};
                s.values["model.ffn_hidden_size"] = int64_t{0};
                s.values["model.seq_length"] = p.seq;
                s.values["model.max_position_embeddings"] = p.seq;
                return "";
              }
            return "'" + answer + "' is not a known size; choose one of the list";
          }};
}

Question count_question(std::string prompt, int64_t minimum, std::function<std::string(const Session&)> default_answer,
                        std::function<void(Session&, int64_t)> set, std::function<bool(const Session&)> applies = always) {
  return {std::move(prompt), std::move(applies), std::move(default_answer),
          [minimum, set](Session& s, const std::string& answer) -> std::string {
            auto v = integer(answer);
            if (!v) return "'" + answer + "' is not an integer";
            if (*v < minimum) return "the answer must be at least " + std::to_string(minimum);
            set(s, *v);
            return "";
          }};
}

int64_t micro_batches_default(const Session& s) {
  int64_t per_step = s.integer("training.micro_batch_size") * std::max<int64_t>(1, s.data_parallel_size());
  int64_t global = s.integer("training.global_batch_size");
  return global % per_step == 0 && global >= per_step ? global / per_step : 1;
}

Question data_question() {
  return {"Dataset prefix(es) from tessera-preprocess, optionally weighted (\"0.3 a 0.7 b\"), or 'mock' for synthetic tokens",
          always,
          [](const Session& s) {
            if (s.boolean("data.mock_data")) return std::string("mock");
            std::string text;
            for (const auto& e : std::get<std::vector<DataPathEntry>>(s.values.at("data.data_path")))
              text += (text.empty() ? "" : " ") + (std::holds_alternative<double>(e) ? train::format_value(std::get<double>(e))
                                                                                      : std::get<std::string>(e));
            return text.empty() ? std::string("mock") : text;
          },
          [](Session& s, const std::string& answer) -> std::string {
            if (answer == "mock") {
              s.values["data.mock_data"] = true;
              if (s.integer("data.vocab_size") == 0) s.values["data.vocab_size"] = int64_t{50257};  // GPT-2's
              s.values["data.data_path"] = std::vector<DataPathEntry>{};
              return "";
            }
            std::vector<DataPathEntry> entries;
            size_t start = 0;
            while (start < answer.size()) {
              size_t end = answer.find(' ', start);
              std::string word = answer.substr(start, end == std::string::npos ? std::string::npos : end - start);
              start = end == std::string::npos ? answer.size() : end + 1;
              if (word.empty()) continue;
              try {
                size_t used = 0;
                double weight = std::stod(word, &used);
                if (used == word.size()) {
                  entries.emplace_back(weight);
                  continue;
                }
              } catch (const std::exception&) {
              }
              if (std::string reason = check_prefix(word); !reason.empty()) return reason;
              entries.emplace_back(absolute(word));
            }
            s.values["data.mock_data"] = false;
            s.values["data.data_path"] = entries;
            return "";
          }};
}

Question file_question(const std::string& key, std::string prompt, std::function<bool(const Session&)> applies) {
  return {std::move(prompt), std::move(applies), [key](const Session& s) { return shown(s.values.at(key)); },
          [key](Session& s, const std::string& answer) -> std::string {
            if (std::string reason = check_file(answer); !reason.empty()) return reason;
            s.values[key] = absolute(answer);
            return "";
          }};
}

bool mock(const Session& s) { return s.boolean("data.mock_data"); }
bool real_data(const Session& s) { return !s.boolean("data.mock_data"); }

}  // namespace

std::vector<Question> questions(const QuestionnaireOptions& options) {
  std::vector<Question> q;
  q.push_back(count_question("How many machines (nodes) will you use?", 1, [](const Session& s) { return std::to_string(s.nodes); },
                             [](Session& s, int64_t v) { s.nodes = v; }));
  q.push_back(count_question("How many GPUs per node (0: a CPU-only run)?", 0,
                             [](const Session& s) { return std::to_string(s.gpus_per_node); },
                             [](Session& s, int64_t v) {
                               s.gpus_per_node = v;
                               s.values["training.device"] = std::string(v > 0 ? "cuda" : "cpu");
                             }));
  q.push_back(count_question("How many ranks (CPU processes) per node?", 1,
                             [](const Session& s) { return std::to_string(s.cpu_ranks_per_node); },
                             [](Session& s, int64_t v) { s.cpu_ranks_per_node = v; },
                             [](const Session& s) { return s.gpus_per_node == 0; }));
  if (options.ask_existing_config)
    q.push_back({"Start from an existing config file (a path, or 'none')", always, [](const Session&) { return std::string("none"); },
                 [](Session& s, const std::string& answer) -> std::string {
                   if (answer == "none") return "";
                   int64_t nodes = s.nodes, gpus = s.gpus_per_node;
                   try {
                     load_existing(s, answer);
                   } catch (const ConfigError& e) {
                     return e.message();
                   }
                   s.nodes = nodes, s.gpus_per_node = gpus;
                   return "";
                 }});
  q.push_back(key_question("model.architecture", "Model family"));
  q.push_back(model_size_question());
  q.push_back(key_question("parallel.tensor_model_parallel_size", "Tensor-parallel size (TP)", always,
                           [](const Session& s, const ConfigValue& v) { return check_tensor_parallel(s, std::get<int64_t>(v)); }));
  q.push_back(key_question("parallel.sequence_parallel", "Sequence parallelism (needs TP > 1)?",
                           [](const Session& s) { return s.integer("parallel.tensor_model_parallel_size") > 1; },
                           [](const Session& s, const ConfigValue& v) {
                             return std::get<bool>(v) ? check_sequence_parallel(s, s.integer("parallel.tensor_model_parallel_size"))
                                                      : std::string();
                           }));
  q.push_back(key_question("parallel.pipeline_model_parallel_size", "Pipeline-parallel size (PP)", always,
                           [](const Session& s, const ConfigValue& v) { return check_pipeline_parallel(s, std::get<int64_t>(v)); }));
  q.push_back(key_question("training.micro_batch_size", "Micro-batch size (sequences per micro-batch)", always,
                           [](const Session&, const ConfigValue& v) {
                             return std::get<int64_t>(v) >= 1 ? std::string() : std::string("must be at least 1");
                           }));
  q.push_back(count_question("Micro-batches per step (gradient accumulation; with PP the pipeline's micro-batches)", 1,
                             [](const Session& s) { return std::to_string(micro_batches_default(s)); },
                             [](Session& s, int64_t v) {
                               s.values["training.global_batch_size"] =
                                   s.integer("training.micro_batch_size") * v * s.data_parallel_size();
                             }));
  q.push_back(key_question("parallel.recompute_granularity", "Activation recomputation"));
  q.push_back(key_question("parallel.use_distributed_optimizer", "Distributed optimizer (shard optimizer state over DP)?"));
  q.push_back(key_question("optimizer.clip_grad", "Gradient clipping by global norm (0: off)", always,
                           [](const Session&, const ConfigValue& v) {
                             return std::get<double>(v) >= 0 ? std::string() : std::string("must be >= 0");
                           }));
  Question precision = key_question("training.precision", "Precision");
  precision.default_answer = [](const Session& s) {  // bf16 is for GPUs; a CPU-only run defaults to fp32
    return s.gpus_per_node == 0 && s.string("training.precision") == "bf16" ? std::string("fp32")
                                                                           : s.string("training.precision");
  };
  q.push_back(precision);
  q.push_back(data_question());
  q.push_back(key_question("data.vocab_size", "Vocabulary size of the synthetic tokens",
                           mock, [](const Session&, const ConfigValue& v) {
                             return std::get<int64_t>(v) > 0 ? std::string() : std::string("must be positive");
                           }));
  q.push_back(key_question("data.tokenizer_type", "Tokenizer", real_data));
  q.push_back(file_question("data.vocab_file", "Tokenizer vocabulary file (vocab.json / vocab.txt)", [](const Session& s) {
    return real_data(s) && s.string("data.tokenizer_type") != "NullTokenizer" &&
           s.string("data.tokenizer_type") != "SentencePieceTokenizer";
  }));
  q.push_back(file_question("data.tokenizer_model", "SentencePiece model file (spiece.model)", [](const Session& s) {
    return real_data(s) && s.string("data.tokenizer_type") == "SentencePieceTokenizer";
  }));
  q.push_back(file_question("data.merge_file", "GPT-2 BPE merges file (merges.txt)", [](const Session& s) {
    return real_data(s) && s.string("data.tokenizer_type") == "GPT2BPETokenizer";
  }));
  q.push_back(key_question("data.vocab_size", "NullTokenizer vocabulary size", [](const Session& s) {
    return real_data(s) && s.string("data.tokenizer_type") == "NullTokenizer";
  }));
  q.push_back(key_question("checkpoint.save", "Checkpoint directory (a path, or 'none')"));
  if (options.ask_output)
    q.push_back({"Write the config to", always,
                 [](const Session& s) { return s.output.empty() ? std::string("tessera.toml") : s.output; },
                 [](Session& s, const std::string& answer) -> std::string {
                   fs::path parent = fs::path(answer).parent_path();
                   if (fs::is_directory(answer)) return "'" + answer + "' is a folder; give a file name";
                   if (!parent.empty() && !fs::is_directory(parent)) return "folder '" + parent.string() + "' does not exist";
                   s.output = answer;
                   return "";
                 }});
  return q;
}

void run_questionnaire(Session& session, Terminal& terminal, const QuestionnaireOptions& options) {
  std::vector<std::string> said;
  for (const auto& question : questions(options)) {
    if (!question.applies(session)) continue;
    for (;;) {
      std::string default_answer = question.default_answer(session);
      std::string answer = options.take_defaults ? default_answer : terminal.ask(question.prompt, default_answer);
      std::string reason = question.apply(session, answer);
      if (reason.empty()) break;
      if (options.take_defaults)
        TESSERA_CONFIG_FAIL("tessera-config --defaults: the default answer '", default_answer, "' to \"", question.prompt,
                            "\" does not fit: ", reason, " (give the value with --set, --nodes or --gpus-per-node)");
      terminal.reject(reason);
    }
    for (const auto& note : unsupported_notes(session))  // say it as soon as such an answer is given
      if (std::find(said.begin(), said.end(), note) == said.end()) {
        if (!options.take_defaults) terminal.say("  note: " + note);
        said.push_back(note);
      }
  }
  if (session.integer("parallel.tensor_model_parallel_size") == 1) session.values["parallel.sequence_parallel"] = false;
}

}  // namespace tessera::config_app
