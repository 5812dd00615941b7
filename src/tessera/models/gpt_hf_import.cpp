#include "tessera/models/gpt_hf_import.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tessera/ckpt/safetensors.h"
#include "tessera/core/error.h"

namespace tessera::models {

namespace fs = std::filesystem;

HfGpt2Config read_hf_gpt2_config(const std::string& dir) {
  fs::path path = fs::path(dir) / "config.json";
  std::ifstream in(path);
  if (!in) TESSERA_CONFIG_FAIL("cannot open Hugging Face config '", path.string(), "'");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    TESSERA_CONFIG_FAIL(path.string(), ": invalid JSON: ", e.what());
  }
  auto need = [&](const char* key) -> const nlohmann::json& {
    if (!j.contains(key)) TESSERA_CONFIG_FAIL(path.string(), ": missing key '", key, "'");
    return j[key];
  };
  if (j.value("model_type", "") != "gpt2")
    TESSERA_CONFIG_FAIL(path.string(), ": model_type is '", j.value("model_type", ""), "', expected 'gpt2'");
  std::string activation = j.value("activation_function", "gelu_new");
  if (activation != "gelu_new" && activation != "gelu_pytorch_tanh")
    TESSERA_CONFIG_FAIL(path.string(), ": activation_function '", activation,
                        "' is not supported; allowed: gelu_new, gelu_pytorch_tanh");
  if (!j.value("tie_word_embeddings", true))
    TESSERA_CONFIG_FAIL(path.string(), ": untied GPT-2 output weights are not supported yet");

  HfGpt2Config result;
  auto& m = result.model;
  m = TransformerConfig{};  // the config schema's defaults
  m.num_layers = need("n_layer").get<int64_t>();
  m.hidden_size = need("n_embd").get<int64_t>();
  m.num_attention_heads = need("n_head").get<int64_t>();
  m.num_query_groups = m.num_attention_heads;
  m.ffn_hidden_size = j.contains("n_inner") && !j["n_inner"].is_null() ? j["n_inner"].get<int64_t>() : 4 * m.hidden_size;
  m.max_position_embeddings = need("n_positions").get<int64_t>();
  m.seq_length = m.max_position_embeddings;
  m.layernorm_epsilon = j.value("layer_norm_epsilon", 1e-5);
  m.hidden_dropout = j.value("resid_pdrop", 0.1);
  m.attention_dropout = j.value("attn_pdrop", 0.1);
  m.init_method_std = j.value("initializer_range", 0.02);
  result.vocab_size = need("vocab_size").get<int64_t>();
  return result;
}

namespace {

// Copies an HF tensor (f32 values) into a parameter, checking the element count.
void copy_into(const Tensor& param, const std::vector<float>& values, const std::string& name) {
  TESSERA_CHECK(static_cast<int64_t>(values.size()) == param.numel(), name, ": ", values.size(),
                " values for parameter ", param.describe());
  float* out = param.data_as<float>();
  std::copy(values.begin(), values.end(), out);
}

std::vector<float> read(const ckpt::SafetensorsCheckpoint& ckpt, const std::string& name, const Shape& shape) {
  std::string key = name;
  if (!ckpt.contains(key) && ckpt.contains("transformer." + name)) key = "transformer." + name;
  if (!ckpt.contains(key) && key.rfind("transformer.", 0) == 0 && ckpt.contains(key.substr(12))) key = key.substr(12);
  const auto& info = ckpt.info(key);
  if (info.shape != shape)
    TESSERA_CONFIG_FAIL(ckpt.path().string(), ": tensor '", key, "' has shape ", shape_string(info.shape),
                        ", expected ", shape_string(shape));
  return ckpt.read_as_f32(key);
}

// HF Conv1D weight [in, out] -> ours [out, in].
std::vector<float> transpose(const std::vector<float>& w, int64_t in, int64_t out) {
  std::vector<float> t(w.size());
  for (int64_t i = 0; i < in; ++i)
    for (int64_t o = 0; o < out; ++o) t[o * in + i] = w[i * out + o];
  return t;
}

}  // namespace

void load_hf_gpt2_weights(GPTModel& model, const std::string& dir) {
  TESSERA_CHECK(model.parameters().dtype() == DType::f32 && model.parameters().device().is_cpu(),
                "HF import needs an f32 CPU model");
  fs::path file = fs::path(dir) / "model.safetensors";
  fs::path index = fs::path(dir) / "model.safetensors.index.json";
  auto ckpt = ckpt::SafetensorsCheckpoint::open(fs::exists(index) ? index : file);
  const auto& cfg = model.config();
  int64_t h = cfg.hidden_size, ffn = cfg.ffn_hidden_size, heads = cfg.num_attention_heads, hn = h / heads;
  int64_t vocab = model.vocab_size();
  auto& store = model.parameters();
  auto param = [&](const std::string& name) { return store.find(name).value; };

  {  // word embedding, zero-padded rows for the dummy tokens
    auto wte = read(ckpt, "transformer.wte.weight", {vocab, h});
    Tensor p = param("embedding.word_embeddings.weight");
    std::fill(p.data_as<float>(), p.data_as<float>() + p.numel(), 0.0f);
    std::copy(wte.begin(), wte.end(), p.data_as<float>());
  }
  copy_into(param("embedding.position_embeddings.weight"),
            read(ckpt, "transformer.wpe.weight", {cfg.max_position_embeddings, h}), "wpe");
  for (int64_t l = 0; l < cfg.num_layers; ++l) {
    std::string hf = "transformer.h." + std::to_string(l) + ".";
    std::string ours = "decoder.layers." + std::to_string(l) + ".";
    copy_into(param(ours + "input_layernorm.weight"), read(ckpt, hf + "ln_1.weight", {h}), hf + "ln_1.weight");
    copy_into(param(ours + "input_layernorm.bias"), read(ckpt, hf + "ln_1.bias", {h}), hf + "ln_1.bias");
    copy_into(param(ours + "pre_mlp_layernorm.weight"), read(ckpt, hf + "ln_2.weight", {h}), hf + "ln_2.weight");
    copy_into(param(ours + "pre_mlp_layernorm.bias"), read(ckpt, hf + "ln_2.bias", {h}), hf + "ln_2.bias");

    // c_attn: HF column part*h + head*hn + d  ->  our row head*3hn + part*hn + d
    auto w = transpose(read(ckpt, hf + "attn.c_attn.weight", {h, 3 * h}), h, 3 * h);  // [3h (HF order), h]
    auto b = read(ckpt, hf + "attn.c_attn.bias", {3 * h});
    std::vector<float> qkv_w(w.size()), qkv_b(b.size());
    for (int64_t part = 0; part < 3; ++part)
      for (int64_t head = 0; head < heads; ++head)
        for (int64_t d = 0; d < hn; ++d) {
          int64_t hf_row = part * h + head * hn + d, our_row = head * 3 * hn + part * hn + d;
          std::copy(w.begin() + hf_row * h, w.begin() + (hf_row + 1) * h, qkv_w.begin() + our_row * h);
          qkv_b[our_row] = b[hf_row];
        }
    copy_into(param(ours + "self_attention.linear_qkv.weight"), qkv_w, hf + "attn.c_attn.weight");
    copy_into(param(ours + "self_attention.linear_qkv.bias"), qkv_b, hf + "attn.c_attn.bias");
    copy_into(param(ours + "self_attention.linear_proj.weight"),
              transpose(read(ckpt, hf + "attn.c_proj.weight", {h, h}), h, h), hf + "attn.c_proj.weight");
    copy_into(param(ours + "self_attention.linear_proj.bias"), read(ckpt, hf + "attn.c_proj.bias", {h}),
              hf + "attn.c_proj.bias");
    copy_into(param(ours + "mlp.linear_fc1.weight"), transpose(read(ckpt, hf + "mlp.c_fc.weight", {h, ffn}), h, ffn),
              hf + "mlp.c_fc.weight");
    copy_into(param(ours + "mlp.linear_fc1.bias"), read(ckpt, hf + "mlp.c_fc.bias", {ffn}), hf + "mlp.c_fc.bias");
    copy_into(param(ours + "mlp.linear_fc2.weight"), transpose(read(ckpt, hf + "mlp.c_proj.weight", {ffn, h}), ffn, h),
              hf + "mlp.c_proj.weight");
    copy_into(param(ours + "mlp.linear_fc2.bias"), read(ckpt, hf + "mlp.c_proj.bias", {h}), hf + "mlp.c_proj.bias");
  }
  copy_into(param("decoder.final_layernorm.weight"), read(ckpt, "transformer.ln_f.weight", {h}), "ln_f.weight");
  copy_into(param("decoder.final_layernorm.bias"), read(ckpt, "transformer.ln_f.bias", {h}), "ln_f.bias");
}

}  // namespace tessera::models
