#include "tessera/convert/hf_import.h"

#include <algorithm>
#include <map>
#include <set>

#include "tessera/ckpt/safetensors.h"
#include "tessera/convert/checkpoint_writer.h"
#include "tessera/convert/hf_family.h"
#include "tessera/convert/hf_layout.h"
#include "tessera/convert/stored_config.h"
#include "tessera/core/error.h"
#include "tessera/models/vocab.h"

namespace tessera::convert {

namespace fs = std::filesystem;

namespace {

// HF buffers that are not parameters (GPT-2's causal mask) and the tied head, which HF drops on save.
bool ignorable(const std::string& name) {
  return name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias") || name == "lm_head.weight" ||
         name.ends_with(".rotary_emb.inv_freq") ||  // older Llama files store RoPE's frequencies
         name.starts_with("cls.predictions.decoder.") || name.ends_with("embeddings.position_ids") ||  // BERT: tied decoder, position ids buffer
         name == "encoder.embed_tokens.weight" || name == "decoder.embed_tokens.weight";  // T5: copies of shared.weight
}

// The checkpoint's key for an HF name: save_pretrained writes "transformer.h.0...", the hub's
// base-model files "h.0..." (no prefix); accept both.
std::string find_key(const ckpt::SafetensorsCheckpoint& st, const std::string& hf_name) {
  if (st.contains(hf_name)) return hf_name;
  const auto dot = hf_name.find('.');
  if (dot != std::string::npos && st.contains(hf_name.substr(dot + 1))) return hf_name.substr(dot + 1);
  return "";
}

std::string where(const ckpt::SafetensorsCheckpoint& st, const std::string& key) {
  return st.file_of(key).path().string();
}

}  // namespace

ImportResult import_hf(const fs::path& hf_dir, const fs::path& output, const LayoutOptions& options,
                       const WriterRanks& ranks) {
  const nlohmann::json hf_config = read_hf_config_json(hf_dir.string());
  const std::string config_path = (hf_dir / "config.json").string();
  if (!hf_config.contains("model_type") || !hf_config["model_type"].is_string())
    TESSERA_CONFIG_FAIL(config_path, ": no \"model_type\" string; supported: ", supported_model_types());
  const HfFamily& family = hf_family(hf_config["model_type"].get<std::string>(), config_path);
  int64_t vocab = 0;
  std::vector<std::string> keys = family.model_keys(hf_config, config_path, vocab);
  const DType dtype = parse_params_dtype(options.params_dtype.value_or("fp32"), "--params-dtype");
  const std::string precision = dtype == DType::f32 ? "fp32" : dtype == DType::bf16 ? "bf16" : "fp16";
  for (const std::string& key : std::vector<std::string>{
           "parallel.tensor_model_parallel_size=" + std::to_string(options.tensor_model_parallel_size),
           "parallel.pipeline_model_parallel_size=" + std::to_string(options.pipeline_model_parallel_size),
           "parallel.num_layers_per_virtual_pipeline_stage=" +
               std::to_string(options.num_layers_per_virtual_pipeline_stage),
           "parallel.expert_model_parallel_size=" + std::to_string(options.expert_model_parallel_size),
           "parallel.use_distributed_optimizer=" + std::string(options.use_distributed_optimizer ? "true" : "false"),
           "model.make_vocab_size_divisible_by=" + std::to_string(options.make_vocab_size_divisible_by.value_or(128)),
           "training.precision=\"" + precision + "\""})
    keys.push_back(key);
  if (options.expert_model_parallel_size != 1 && family.model_type != "mixtral")
    TESSERA_CONFIG_FAIL("--expert-model-parallel-size ", options.expert_model_parallel_size,
                        ": ", family.model_type, " has no experts (expert parallelism needs a MoE family: mixtral)");
  const train::Config config = conversion_config(keys, vocab);  // EP not dividing num_experts: ConfigError
  const std::vector<models::CheckpointTensor> tensors = family.checkpoint_tensors(config, vocab);

  // Every HF tensor must be known, every needed one present with the expected shape.
  const auto st = ckpt::SafetensorsCheckpoint::open(hf_dir);
  const std::vector<models::HfTensorName> names = family.tensor_names(config.model);
  std::map<std::string, std::vector<const models::HfTensorName*>> by_tessera;  // several: a fused tensor
  std::set<std::string> used;
  HfLayoutContext ctx{config.model.num_attention_heads, vocab, config.model.num_query_groups};
  for (const auto& n : names) {
    by_tessera[n.tessera].push_back(&n);
    const std::string key = find_key(st, n.hf);
    if (key.empty())
      TESSERA_CONFIG_FAIL((st.sharded() ? st.path() : st.files().front().path()).string(), ": missing tensor '", n.hf, "' (", family.model_type, " with ",
                          config.model.num_layers, " layers needs it)");
    used.insert(key);
  }
  for (const std::string& name : st.names())
    if (!used.count(name) && !ignorable(name))
      TESSERA_CONFIG_FAIL(where(st, name), ": unexpected tensor '", name, "' (not part of a ", family.model_type,
                          " with ", config.model.num_layers, " layers)");

  const int64_t tp = options.tensor_model_parallel_size;
  // EP > 1: one model file per EP rank (mp_rank_TT_PPP_EEE), each with its experts; the smallest
  // data-parallel size that holds EP ranks (EP divides DP) is recorded, any DP loads it.
  const int ep = static_cast<int>(options.expert_model_parallel_size);
  TargetLayout target{static_cast<int>(tp), static_cast<int>(options.pipeline_model_parallel_size), ep, ep, false,
                      config.model.num_experts};
  CheckpointWriter writer(output, 0, target, dtype, false, ranks);
  ImportResult result;
  std::vector<float> hf_values, global;
  for (const models::CheckpointTensor& t : tensors) {
    ++result.tensors;
    result.bytes_written += static_cast<int64_t>(t.stages.size()) * shape_numel(t.global_shape) *
                            static_cast<int64_t>(dtype_size(dtype));
    if (!writer.wants(t)) continue;  // another rank's files hold it
    // The tied output layer copy on the last stage holds the word embedding.
    const std::string source = !t.copy_of.empty() && !by_tessera.count(t.name) ? t.copy_of : t.name;
    auto it = by_tessera.find(source);
    TESSERA_CHECK(it != by_tessera.end(), "no Hugging Face name for ", source);
    const models::HfLayout layout = it->second.front()->layout;
    const Shape full = hf_shape(layout, t.global_shape, ctx);  // HF order; the parts' rows concatenated
    hf_values.assign(static_cast<size_t>(shape_numel(full)), 0.0f);
    const int64_t row_elements = full.empty() || full[0] == 0 ? 0 : shape_numel(full) / full[0];
    int64_t rows_read = 0;
    for (const models::HfTensorName* n : it->second) {
      const std::string key = find_key(st, n->hf);
      const auto& info = st.info(key);
      const Shape want = hf_part_shape(*n, t.global_shape, ctx);
      if (info.shape != want)
        TESSERA_CONFIG_FAIL(where(st, key), ": tensor '", key, "' has shape ", shape_string(info.shape), ", expected ",
                            shape_string(want), " (from ", config_path, ")");
      const std::vector<float> part = st.read_as_f32(key);  // ConfigError naming file and tensor for other dtypes
      std::copy(part.begin(), part.end(), hf_values.begin() + n->row_begin * row_elements);
      rows_read += n->rows > 0 ? n->rows : (full.empty() ? 1 : full[0]);
    }
    TESSERA_CHECK(full.empty() || rows_read == full[0], "the Hugging Face tensors of ", t.name, " cover ", rows_read,
                  " of its ", full[0], " rows");
    global.resize(static_cast<size_t>(shape_numel(t.global_shape)));
    hf_to_tessera(layout, hf_values.data(), t.global_shape, ctx, global.data());
    writer.write_param(t, global.data());
  }

  CommonInfo common;
  common.progress.seed = config.training.seed;
  common.metadata.params_dtype = std::string(dtype_name(dtype));
  common.metadata.config_toml = config.to_toml();
  common.metadata.model = {
      {"vocab_size", vocab},
      {"padded_vocab_size", models::padded_vocab_size(vocab, config.model.make_vocab_size_divisible_by, tp)},
      {"num_layers", config.model.num_layers},
      {"hidden_size", config.model.hidden_size},
      {"num_attention_heads", config.model.num_attention_heads},
      {"seq_length", config.model.seq_length}};
  result.folder = writer.commit(common);
  return result;
}

}  // namespace tessera::convert
