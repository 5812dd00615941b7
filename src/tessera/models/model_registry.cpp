#include "tessera/models/model_registry.h"

#include <sstream>

#include "tessera/core/error.h"
#include "tessera/models/bert.h"
#include "tessera/models/gpt.h"
#include "tessera/models/t5.h"

namespace tessera::models {

namespace {
void check_divisible(int64_t value, const char* key, int64_t tp);

std::unique_ptr<StageModel> build_gpt(const ModelBuildArgs& a) {
  check_tensor_parallel_split(*a.config, a.tp, a.pipeline_size);
  auto model = std::make_unique<GPTModel>(*a.config, a.vocab_size, a.dtype, a.device, a.chunks, a.tp, a.ep);
  model->set_recompute(a.recompute);
  return model;
}

std::unique_ptr<StageModel> build_bert(const ModelBuildArgs& a) {
  check_tensor_parallel_split(*a.config, a.tp, a.pipeline_size);
  auto model = std::make_unique<BertModel>(*a.config, a.vocab_size, a.dtype, a.device, a.chunks, a.tp);
  model->set_recompute(a.recompute);
  return model;
}

std::unique_ptr<StageModel> build_t5(const ModelBuildArgs& a) {
  if (a.pipeline_size > 1)
    TESSERA_CONFIG_FAIL("parallel.pipeline_model_parallel_size = ", a.pipeline_size,
                        " is not supported by model.architecture = t5: pipeline parallelism of an encoder-decoder ",
                        "model needs Megatron's encoder/decoder split (pipeline_model_parallel_split_rank), which ",
                        "is not supported; use tensor (+ sequence) and data parallelism");
  if (a.recompute.granularity != nn::RecomputeGranularity::none)
    TESSERA_CONFIG_FAIL("parallel.recompute_granularity = ", nn::name(a.recompute.granularity),
                        " is not supported by model.architecture = t5 (none only)");
  check_tensor_parallel_split(*a.config, a.tp, a.pipeline_size);
  if (a.tp.sequence_parallel)
    check_divisible(a.config->decoder_seq_length, "model.decoder_seq_length (with parallel.sequence_parallel)",
                    a.tp.size);
  return std::make_unique<T5Model>(*a.config, a.vocab_size, a.dtype, a.device, a.chunks, a.tp);
}

const std::vector<ModelFamily>& families() {
  static const std::vector<ModelFamily> table = {
      {"gpt", build_gpt},
      {"bert", build_bert},
      {"t5", build_t5},
  };
  return table;
}

void check_divisible(int64_t value, const char* key, int64_t tp) {
  if (value % tp != 0)
    TESSERA_CONFIG_FAIL(key, " = ", value, " is not divisible by parallel.tensor_model_parallel_size = ", tp,
                        "; choose a tensor-parallel size that divides it");
}
}  // namespace

std::vector<std::string> registered_architectures() {
  std::vector<std::string> names;
  for (const auto& f : families()) names.push_back(f.architecture);
  return names;
}

const ModelFamily& model_family(const std::string& architecture) {
  for (const auto& f : families())
    if (f.architecture == architecture) return f;
  std::ostringstream known;
  for (const auto& name : registered_architectures()) known << (known.tellp() > 0 ? ", " : "") << name;
  TESSERA_CONFIG_FAIL("model.architecture = '", architecture, "' has no model family; registered: ", known.str());
}

void check_tensor_parallel_split(const TransformerConfig& m, const parallel::TensorParallel& tp, int pipeline_size) {
  check_divisible(m.num_attention_heads, "model.num_attention_heads", tp.size);
  check_divisible(m.num_query_groups > 0 ? m.num_query_groups : m.num_attention_heads, "model.num_query_groups",
                  tp.size);
  check_divisible(m.ffn_hidden_size > 0 ? m.ffn_hidden_size : 4 * m.hidden_size, "model.ffn_hidden_size", tp.size);
  // Under sequence parallelism with pipeline parallelism, the hidden states sent between stages are
  // this rank's seq_length * micro_batch_size / TP tokens (GPTModel::stage_shapes).
  (void)pipeline_size;
  if (tp.sequence_parallel) check_divisible(m.seq_length, "model.seq_length (with parallel.sequence_parallel)", tp.size);
}

double flops_per_token(const TransformerConfig& m, int64_t counted_parameters) {
  return 6.0 * static_cast<double>(counted_parameters) +
         12.0 * static_cast<double>(m.num_layers) * static_cast<double>(m.hidden_size) * static_cast<double>(m.seq_length);
}

int64_t moe_active_expert_parameters(const TransformerConfig& m) {
  if (m.num_experts <= 0) return 0;
  const int64_t h = m.hidden_size, f = m.expert_ffn_hidden_size(), gates = m.activation == "swiglu" ? 2 : 1;
  const int64_t bias = m.add_bias_linear ? 1 : 0;
  const int64_t per_expert = h * f * gates + bias * f * gates + f * h + bias * h;  // linear_fc1 + linear_fc2
  int64_t layers = 0;
  for (int64_t i = 0; i < m.num_layers; ++i) layers += m.is_moe_layer(i) ? 1 : 0;
  return layers * m.moe_router_topk * per_expert;
}

}  // namespace tessera::models
