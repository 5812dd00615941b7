#include "tessera/train/config_schema.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "tessera/models/loss_registry.h"
#include "tessera/models/model_registry.h"

namespace tessera::train {

namespace {
using VT = ValueType;
using S = std::string;
constexpr std::string_view kMoe = "mixture of experts";
constexpr std::string_view kArch = "BERT, T5 and Llama-style model variants";

// model.architecture accepts the families of the model registry (models/model_registry.cpp).
std::vector<ConfigValue> registered_architectures() {
  std::vector<ConfigValue> values;
  for (const auto& name : models::registered_architectures()) values.push_back(name);
  return values;
}

// loss.<key> keys from the registered losses' parameters (views into the registry, which keeps them).
void append_loss_keys(std::vector<KeySpec>& schema) {
  for (const auto& loss : models::registered_losses()) {
    for (const auto& p : loss.params) {
      KeySpec spec{"loss", p.key, VT::integer, int64_t{0}, p.help};
      std::visit(
          [&](const auto& v) {
            using T = std::decay_t<decltype(v)>;
            if constexpr (std::is_same_v<T, int64_t>) spec.type = VT::integer;
            else if constexpr (std::is_same_v<T, double>) spec.type = VT::floating;
            else if constexpr (std::is_same_v<T, std::string>) spec.type = VT::string;
            else spec.type = VT::integer_list;
            spec.default_value = v;
          },
          p.default_value);
      schema.push_back(spec);
    }
  }
}
}  // namespace

const std::vector<KeySpec>& config_schema() {
  static const std::vector<KeySpec> schema = [] {
  std::vector<KeySpec> keys = {
      // [model]
      {"model", "architecture", VT::string, S("gpt"), "gpt | bert | t5 (the model registry's families)", kArch,
       registered_architectures()},
      {"model", "num_layers", VT::integer, int64_t{12}, "transformer layers"},
      {"model", "hidden_size", VT::integer, int64_t{768}, "hidden size h"},
      {"model", "num_attention_heads", VT::integer, int64_t{12}, "attention heads"},
      {"model", "num_query_groups", VT::integer, int64_t{0},
       "key/value heads (0 = num_attention_heads; fewer: grouped-query attention; 1: multi-query)"},
      {"model", "ffn_hidden_size", VT::integer, int64_t{0}, "MLP hidden size (0 = 4 x hidden_size)"},
      {"model", "seq_length", VT::integer, int64_t{1024}, "training sequence length"},
      {"model", "decoder_seq_length", VT::integer, int64_t{128},
       "t5: decoder sequence length (Megatron's --decoder-seq-length; model.seq_length is the encoder's)"},
      {"model", "num_decoder_layers", VT::integer, int64_t{0},
       "t5: decoder layers (0 = num_layers; model.num_layers is the encoder's)"},
      {"model", "kv_channels", VT::integer, int64_t{0},
       "t5: width of each head's query, key and value (0 = hidden_size / num_attention_heads; HF's d_kv)"},
      {"model", "relative_attention_num_buckets", VT::integer, int64_t{32},
       "t5: relative position buckets of the attention bias"},
      {"model", "relative_attention_max_distance", VT::integer, int64_t{128},
       "t5: distance from which relative positions share the last bucket"},
      {"model", "max_position_embeddings", VT::integer, int64_t{1024}, "learned position table size"},
      {"model", "position_embedding_type", VT::string, S("learned_absolute"),
       "learned_absolute | rope | alibi | none | relative (T5's relative position buckets; t5's default)", kArch,
       {S("learned_absolute"), S("rope"), S("alibi"), S("none"), S("relative")}},
      {"model", "rotary_base", VT::floating, 10000.0, "RoPE base theta (HF rope_theta; Llama-3: 500000)"},
      {"model", "rotary_percent", VT::floating, 1.0, "fraction of each head's dims that RoPE rotates, in (0, 1]"},
      {"model", "rotary_interleaved", VT::boolean, false,
       "RoPE pairs (2i, 2i+1) instead of (i, i + d/2) (HF Llama and Megatron's default: false)"},
      {"model", "normalization", VT::string, S("layernorm"), "layernorm | rmsnorm", kArch,
       {S("layernorm"), S("rmsnorm")}},
      {"model", "norm_epsilon", VT::floating, 0.0,
       "epsilon of every LayerNorm / RMSNorm (Megatron's --norm-epsilon; 0 = model.layernorm_epsilon)"},
      {"model", "activation", VT::string, S("gelu"),
       "gelu (tanh approximation) | swiglu | relu | squared_relu | geglu (t5: relu = T5 v1.0, the default; "
       "geglu = v1.1's gated-gelu)",
       kArch, {S("gelu"), S("swiglu"), S("relu"), S("geglu")}},
      {"model", "untie_embeddings_and_output_weights", VT::boolean, false,
       "separate output layer weights (Llama: true)"},
      {"model", "add_bias_linear", VT::boolean, true,
       "biases in the QKV, attention projection and MLP linears (Llama: false)"},
      {"model", "attention_head_type", VT::string, S("multihead"),
       "multihead | multiquery (multiquery = num_query_groups 1; the Accelerate guide's name)"},
      {"model", "make_vocab_size_divisible_by", VT::integer, int64_t{128}, "vocabulary padding multiple"},
      {"model", "hidden_dropout", VT::floating, 0.1, "dropout after attention/MLP and on embeddings"},
      {"model", "attention_dropout", VT::floating, 0.1, "dropout on attention probabilities"},
      {"model", "layernorm_epsilon", VT::floating, 1e-5, "LayerNorm / RMSNorm epsilon (see norm_epsilon)"},
      {"model", "init_method_std", VT::floating, 0.02, "std of the normal weight initialisation"},
      {"model", "num_experts", VT::integer, int64_t{0},
       "> 0: mixture of experts (experts per MoE layer; CPU fp32, or one GPU (EP = 1) in fp32 / bf16 / fp16: docs/moe.md)"},
      {"model", "moe_router_topk", VT::integer, int64_t{2}, "experts per token (1 .. num_experts)"},
      {"model", "moe_ffn_hidden_size", VT::integer, int64_t{0}, "each expert's FFN hidden size (0 = ffn_hidden_size)"},
      {"model", "moe_router_load_balancing_type", VT::string, S("aux_loss"),
       "aux_loss (Switch/GShard load-balancing loss) | none", {}, {S("aux_loss"), S("none")}},
      {"model", "moe_aux_loss_coeff", VT::floating, 0.0, "weight of the load-balancing loss (>= 0; 1e-2 is common)"},
      {"model", "moe_z_loss_coeff", VT::floating, 0.0, "weight of the router z-loss (>= 0; 1e-3 suggested; 0: off)"},
      {"model", "moe_router_score_function", VT::string, S("softmax"), "softmax | sigmoid", {},
       {S("softmax"), S("sigmoid")}},
      {"model", "moe_router_pre_softmax", VT::boolean, false,
       "softmax over all experts before the top-k (probabilities not renormalised over the k)"},
      {"model", "moe_expert_capacity_factor", VT::floating, 0.0,
       "> 0: each expert takes at most ceil(tokens x topk / num_experts x this) tokens, the rest are dropped "
       "(lowest probability first); 0: dropless"},
      {"model", "moe_pad_expert_input_to_capacity", VT::boolean, false,
       "with a capacity factor: pad every expert's input to exactly its capacity"},
      {"model", "moe_shared_expert_intermediate_size", VT::integer, int64_t{0},
       "> 0: a shared expert (dense FFN every token goes through) of this hidden size beside the routed ones"},
      {"model", "moe_layer_freq", VT::integer, int64_t{1},
       "layer i is a MoE layer when i % this == 0 (1: every layer)"},
      // [parallel]
      {"parallel", "tensor_model_parallel_size", VT::integer, int64_t{1},
       "TP size (must divide attention heads, query groups and ffn_hidden_size)"},
      {"parallel", "pipeline_model_parallel_size", VT::integer, int64_t{1}, "PP size (1F1B schedule)"},
      {"parallel", "num_layers_per_virtual_pipeline_stage", VT::integer, int64_t{0},
       "> 0: interleaved 1F1B with num_layers / (PP x this) model chunks per stage"},
      {"parallel", "pipeline_layer_split", VT::string, S(""),
       "layers per pipeline stage, e.g. \"3,3,2\" (empty: num_layers / PP each)"},
      {"parallel", "sequence_parallel", VT::boolean, false,
       "sequence parallelism: LayerNorm, dropout and residual on seq_length / TP tokens (needs TP > 1)"},
      {"parallel", "distributed_timeout_minutes", VT::floating, 10.0,
       "a collective not complete after this many minutes ends the job naming the operation (0: wait forever)"},
      {"parallel", "expert_model_parallel_size", VT::integer, int64_t{1},
       "EP size: ranks that share one MoE layer's experts (must divide model.num_experts and the data-parallel size)"},
      {"parallel", "use_distributed_optimizer", VT::boolean, false, "shard optimizer state over DP (ZeRO-1)"},
      {"parallel", "recompute_granularity", VT::string, S("none"),
       "none | selective | full (activation recomputation; docs/recompute.md)", {},
       {S("none"), S("selective"), S("full")}},
      {"parallel", "recompute_method", VT::string, S("uniform"),
       "uniform | block (full: runs of recompute_num_layers layers, or the first recompute_num_layers layers of "
       "each stage)", {}, {S("uniform"), S("block")}},
      {"parallel", "recompute_num_layers", VT::integer, int64_t{1},
       "full: layers per recomputed run (uniform) or recomputed layers per stage / model chunk (block)"},
      // [training]
      {"training", "micro_batch_size", VT::integer, int64_t{4}, "sequences per micro-batch"},
      {"training", "global_batch_size", VT::integer, int64_t{32},
       "sequences per step = micro_batch_size x micro-batches x data-parallel size"},
      {"training", "train_iters", VT::integer, int64_t{1000}, "optimizer steps"},
      {"training", "precision", VT::string, S("bf16"),
       "fp32 | bf16 | fp16 (unset: bf16, fp32 on a CPU-only run)", {}, {S("fp32"), S("bf16"), S("fp16")}},
      {"training", "seed", VT::integer, int64_t{1234}, "seed of initialisation, dropout and data order"},
      {"training", "eval_interval", VT::integer, int64_t{100}, "iterations between evaluations (0: never)"},
      {"training", "eval_iters", VT::integer, int64_t{10}, "forward-only batches per evaluation"},
      {"training", "device", VT::string, S("auto"), "auto | cpu | cuda"},
      {"training", "exit_interval", VT::integer, int64_t{0}, "save and exit when iteration % N == 0 (0: never)"},
      {"training", "exit_duration_in_mins", VT::integer, int64_t{0},
       "save and exit after this many minutes on any rank (0: never)"},
      {"training", "exit_signal_handler", VT::boolean, true,
       "on SIGTERM / SIGUSR1: finish the iteration, save (checkpoint.save) and exit 0"},
      {"training", "loss", VT::string, S("lm"),
       "the loss registry's name: lm (token mean), keytoken_weighted, or a plugin's; its parameters are the "
       "[loss] keys"},
      {"training", "peak_tflops_per_device", VT::floating, 0.0,
       "dense peak TFLOP/s for MFU (0: 989 on CUDA (H100/H200 bf16), no MFU on the CPU)"},
      {"training", "deterministic_mode", VT::boolean, false,
       "bitwise run-to-run reproducible CUDA training (Megatron's --deterministic-mode): every GPU reduction "
       "in a fixed order, no float atomics, GEMMs without split-K (costs some speed; the CPU always is)"},
      // [optimizer]
      {"optimizer", "optimizer", VT::string, S("adam"), "adam (AdamW semantics: decoupled weight decay)", {},
       {S("adam")}},
      {"optimizer", "lr", VT::floating, 6.0e-4, "peak learning rate"},
      {"optimizer", "min_lr", VT::floating, 6.0e-5, "learning rate floor after decay"},
      {"optimizer", "lr_decay_style", VT::string, S("cosine"), "constant | linear | cosine | inverse-square-root | wsd"},
      {"optimizer", "lr_warmup_iters", VT::integer, int64_t{100}, "linear warm-up iterations"},
      {"optimizer", "lr_decay_iters", VT::integer, int64_t{0}, "decay length in iterations (0 = train_iters)"},
      {"optimizer", "lr_wsd_decay_iters", VT::integer, int64_t{0}, "wsd: iterations of the final decay phase"},
      {"optimizer", "lr_wsd_decay_style", VT::string, S("exponential"),
       "wsd decay phase: exponential | linear | cosine | minus_sqrt"},
      {"optimizer", "weight_decay", VT::floating, 0.1, "decoupled weight decay (not on biases and norm weights)"},
      {"optimizer", "adam_beta1", VT::floating, 0.9, "Adam beta1"},
      {"optimizer", "adam_beta2", VT::floating, 0.95, "Adam beta2"},
      {"optimizer", "adam_eps", VT::floating, 1.0e-8, "Adam epsilon"},
      {"optimizer", "clip_grad", VT::floating, 1.0, "clip by global L2 norm (0 disables)"},
      // [data]
      {"data", "data_path", VT::data_path, std::vector<DataPathEntry>{}, "dataset prefixes, optionally weighted"},
      {"data", "split", VT::string, S("969,30,1"), "train,validation,test proportions"},
      {"data", "tokenizer_type", VT::string, S("GPT2BPETokenizer"),
       "GPT2BPETokenizer | BertWordPieceLowerCase | BertWordPieceCase | SentencePieceTokenizer | NullTokenizer"},
      {"data", "vocab_file", VT::string, S(""), "tokenizer vocabulary (vocab.json / vocab.txt)"},
      {"data", "merge_file", VT::string, S(""), "GPT-2 BPE merges.txt"},
      {"data", "mock_data", VT::boolean, false, "synthetic tokens, no files needed"},
      {"data", "vocab_size", VT::integer, int64_t{0}, "NullTokenizer / mock_data vocabulary size (before padding)"},
      {"data", "data_cache_path", VT::string, S(""), "where index caches go (empty: next to the data)"},
      {"data", "eod_mask_loss", VT::boolean, false, "no loss on end-of-document input tokens (Megatron's)"},
      {"data", "reset_position_ids", VT::boolean, false, "positions restart at 0 after each end-of-document token"},
      {"data", "reset_attention_mask", VT::boolean, false,
       "a token attends only to earlier tokens of its own document (documents end at end-of-document tokens)"},
      {"data", "tokenizer_model", VT::string, S(""),
       "SentencePieceTokenizer: the SentencePiece model (spiece.model; Megatron's --tokenizer-model)"},
      {"data", "vocab_extra_ids", VT::integer, int64_t{-1},
       "sentinel tokens <extra_id_0..N-1> added to the vocabulary (-1: 100 for t5, 0 otherwise)"},
      {"data", "mask_prob", VT::floating, 0.15, "bert / t5: the fraction of tokens masked (Megatron's --mask-prob)"},
      {"data", "short_seq_prob", VT::floating, 0.1,
       "bert / t5: probability of a shorter target length in the sample map (--short-seq-prob)"},
      // [checkpoint]
      {"checkpoint", "save", VT::string, S(""), "checkpoint directory to write (empty: no checkpoints)"},
      {"checkpoint", "load", VT::string, S(""), "checkpoint directory to resume from (empty: start fresh)"},
      {"checkpoint", "save_interval", VT::integer, int64_t{0},
       "iterations between saves (0: only at the end and on exit)"},
      {"checkpoint", "no_load_optim", VT::boolean, false, "do not load optimizer state"},
      {"checkpoint", "no_load_rng", VT::boolean, false, "do not load RNG state (the checkpoint's seed)"},
      {"checkpoint", "finetune", VT::boolean, false, "load weights only, reset iteration and optimizer"},
      {"checkpoint", "pretrained_hf", VT::string, S(""),
       "Hugging Face model folder to start from when checkpoint.load has nothing to resume (imported into "
       "<save>/pretrained_hf, then loaded with finetune; its [model] keys are defaults)"},
      {"checkpoint", "async_save", VT::boolean, false,
       "write checkpoints from a background thread while training continues (the last save is synchronous)"},
      {"checkpoint", "keep_last_n", VT::integer, int64_t{0}, "keep only the newest N checkpoints (0: keep all)"},
      // [logging]
      {"logging", "log_interval", VT::integer, int64_t{10}, "iterations between log lines"},
      {"logging", "metrics_file", VT::string, S(""), "JSON Lines metrics file (empty: none)"},
      {"logging", "tensorboard_dir", VT::string, S(""),
       "folder for TensorBoard event files (created if missing; empty: none)"},
  };
  append_loss_keys(keys);
  return keys;
  }();
  return schema;
}

const KeySpec* find_key(std::string_view section, std::string_view key) {
  for (const auto& spec : config_schema())
    if (spec.section == section && spec.key == key) return &spec;
  return nullptr;
}

std::vector<std::string> allowed_choices(const KeySpec& spec) {
  std::vector<std::string> choices;
  if (spec.type != ValueType::string || spec.help.find(" | ") == std::string_view::npos) return choices;
  std::string_view help = spec.help;
  for (size_t start = 0; start <= help.size();) {
    size_t bar = help.find(" | ", start);
    std::string_view word = help.substr(start, bar == std::string_view::npos ? help.size() - start : bar - start);
    if (start == 0 && word.find(':') != std::string_view::npos) return {};  // "wsd decay phase: exponential | ..."
    if (auto space = word.find(' '); space != std::string_view::npos) word = word.substr(0, space);  // "gelu (tanh...)"
    if (word.empty()) return {};
    choices.emplace_back(word);
    if (bar == std::string_view::npos) break;
    start = bar + 3;
  }
  return choices;
}

bool is_supported(const KeySpec& spec, const ConfigValue& value) {
  if (spec.supported_values.empty()) return true;
  for (const auto& allowed : spec.supported_values)
    if (allowed == value) return true;
  return false;
}

std::string value_type_name(ValueType type) {
  switch (type) {
    case ValueType::integer: return "an integer";
    case ValueType::floating: return "a number";
    case ValueType::boolean: return "a boolean (true/false)";
    case ValueType::string: return "a string";
    case ValueType::data_path: return "a list of prefixes, optionally weighted ([0.3, \"a\", 0.7, \"b\"])";
    case ValueType::integer_list: return "a list of integers ([198, 628])";
  }
  return "?";
}

static std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// The shortest decimal that reads back as the same double (0.1, not 0.10000000000000001).
static std::string format_number(double v) {
  std::string s;
  for (int digits = 1; digits <= 17; ++digits) {
    std::ostringstream out;
    out.precision(digits);
    out << v;
    s = out.str();
    if (std::strtod(s.c_str(), nullptr) == v || std::isnan(v)) break;
  }
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

std::string format_value(const ConfigValue& value) {
  return std::visit(
      [](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, int64_t>) return std::to_string(v);
        else if constexpr (std::is_same_v<T, double>) return format_number(v);
        else if constexpr (std::is_same_v<T, bool>) return v ? "true" : "false";
        else if constexpr (std::is_same_v<T, std::string>) return quote(v);
        else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          std::string out = "[";
          for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
          return out + "]";
        } else {
          std::string out = "[";
          for (size_t i = 0; i < v.size(); ++i) {
            if (i) out += ", ";
            if (std::holds_alternative<double>(v[i])) out += format_number(std::get<double>(v[i]));
            else out += quote(std::get<std::string>(v[i]));
          }
          return out + "]";
        }
      },
      value);
}

static size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string closest_key(std::string_view dotted) {
  std::string best;
  size_t best_distance = SIZE_MAX;
  auto dot = dotted.find('.');
  std::string_view bare = dot == std::string_view::npos ? dotted : dotted.substr(dot + 1);
  for (const auto& spec : config_schema()) {
    std::string full = std::string(spec.section) + "." + std::string(spec.key);
    // Compare the whole dotted name, and the key alone so a key in the wrong table is found too.
    size_t d = std::min(edit_distance(dotted, full), edit_distance(bare, spec.key) + 1);
    if (d < best_distance) {
      best_distance = d;
      best = full;
    }
  }
  return best;
}

}  // namespace tessera::train
