// The model seam (docs/architecture.md): TransformerConfig's defaults are the config schema's, the
// registry finds GPT by model.architecture and names the registered families otherwise, GPT
// rejects layer specs it does not build with "not supported yet", and GPT sets the parameter roles
// the trainer, schedules, optimizer and checkpoints use instead of names.
#include <gtest/gtest.h>

#include "tessera/models/gpt.h"
#include "tessera/models/model_registry.h"
#include "tessera/train/config.h"
#include "tessera/train/config_schema.h"
#include "tiny_gpt.h"

namespace tessera {
namespace {

template <typename T>
T schema_default(const char* key) {
  const train::KeySpec* spec = train::find_key("model", key);
  EXPECT_NE(spec, nullptr) << key;
  return spec ? std::get<T>(spec->default_value) : T{};
}

TEST(ModelSeam, TransformerConfigDefaultsAreTheSchemaDefaults) {
  const models::TransformerConfig d{};
  EXPECT_EQ(d.architecture, schema_default<std::string>("architecture"));
  EXPECT_EQ(d.num_layers, schema_default<int64_t>("num_layers"));
  EXPECT_EQ(d.hidden_size, schema_default<int64_t>("hidden_size"));
  EXPECT_EQ(d.num_attention_heads, schema_default<int64_t>("num_attention_heads"));
  EXPECT_EQ(d.num_query_groups, schema_default<int64_t>("num_query_groups"));
  EXPECT_EQ(d.ffn_hidden_size, schema_default<int64_t>("ffn_hidden_size"));
  EXPECT_EQ(d.seq_length, schema_default<int64_t>("seq_length"));
  EXPECT_EQ(d.max_position_embeddings, schema_default<int64_t>("max_position_embeddings"));
  EXPECT_EQ(d.position_embedding_type, schema_default<std::string>("position_embedding_type"));
  EXPECT_EQ(d.normalization, schema_default<std::string>("normalization"));
  EXPECT_EQ(d.activation, schema_default<std::string>("activation"));
  EXPECT_EQ(d.untie_embeddings_and_output_weights, schema_default<bool>("untie_embeddings_and_output_weights"));
  EXPECT_EQ(d.make_vocab_size_divisible_by, schema_default<int64_t>("make_vocab_size_divisible_by"));
  EXPECT_EQ(d.hidden_dropout, schema_default<double>("hidden_dropout"));
  EXPECT_EQ(d.attention_dropout, schema_default<double>("attention_dropout"));
  EXPECT_EQ(d.layernorm_epsilon, schema_default<double>("layernorm_epsilon"));
  EXPECT_EQ(d.init_method_std, schema_default<double>("init_method_std"));
  EXPECT_EQ(d.num_experts, schema_default<int64_t>("num_experts"));
  EXPECT_EQ(d.moe_router_topk, schema_default<int64_t>("moe_router_topk"));
  EXPECT_EQ(d.rotary_base, schema_default<double>("rotary_base"));
  EXPECT_EQ(d.rotary_percent, schema_default<double>("rotary_percent"));
  EXPECT_EQ(d.rotary_interleaved, schema_default<bool>("rotary_interleaved"));
  EXPECT_EQ(d.add_bias_linear, schema_default<bool>("add_bias_linear"));
  EXPECT_EQ(d.attention_head_type, schema_default<std::string>("attention_head_type"));
  EXPECT_EQ(d.norm_epsilon, schema_default<double>("norm_epsilon"));
}

TEST(ModelSeam, RegistryBuildsGptAndNamesTheFamiliesOtherwise) {
  models::TransformerConfig config = test::tiny_model_config(2, 16, 2, 8, 0.0);
  models::ModelBuildArgs args;
  args.config = &config;
  args.vocab_size = 20;
  args.device = Device::cpu();
  std::unique_ptr<models::StageModel> model = models::model_family("gpt").build(args);
  ASSERT_NE(dynamic_cast<models::GPTModel*>(model.get()), nullptr);
  EXPECT_EQ(model->num_chunks(), 1);
  EXPECT_EQ(model->stage_shapes(8, 3), (std::vector<Shape>{{24, 16}}));
  try {
    models::model_family("mamba");
    FAIL() << "an unknown architecture must be a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("model.architecture = 'mamba'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("registered: gpt, bert, t5"), std::string::npos) << e.what();
  }
}

TEST(ModelSeam, GptRejectsLayerSpecsItDoesNotBuild) {
  const std::pair<const char*, void (*)(models::TransformerConfig&)> cases[] = {
      {"model.position_embedding_type = relative",
       [](models::TransformerConfig& c) { c.position_embedding_type = "relative"; }},
      {"model.activation = relu", [](models::TransformerConfig& c) { c.activation = "relu"; }},
      {"model.activation = relu (model.num_experts = 4)",
       [](models::TransformerConfig& c) {
         c.num_experts = 4;  // MoE experts: GeLU or SwiGLU, as the dense MLP
         c.activation = "relu";
       }},
  };
  for (const auto& [message, change] : cases) {
    models::TransformerConfig config = test::tiny_model_config(1, 16, 2, 8, 0.0);
    change(config);
    try {
      models::GPTModel model(config, 20, DType::f32, Device::cpu());
      ADD_FAILURE() << message << " was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("not supported yet"), std::string::npos) << e.what();
    }
  }
  models::TransformerConfig bad = test::tiny_model_config(1, 16, 2, 8, 0.0);
  bad.normalization = "batchnorm";
  EXPECT_THROW(models::decoder_layer_spec(bad), ConfigError);
}

TEST(ModelSeam, GptSetsParameterRolesAtRegistration) {
  models::TransformerConfig config = test::tiny_model_config(2, 16, 2, 8, 0.0);
  // Two pipeline stages: the first holds the word embedding, the last its copy (the output layer).
  models::GPTModel first(config, 20, DType::f32, Device::cpu(), {{true, false, 0, 1}});
  models::GPTModel last(config, 20, DType::f32, Device::cpu(), {{false, true, 1, 1}});
  ASSERT_EQ(first.parameters().tied_embeddings().size(), 1u);
  ASSERT_EQ(last.parameters().tied_embeddings().size(), 1u);
  const nn::Parameter& word = first.parameters().parameters()[first.parameters().tied_embeddings()[0]];
  const nn::Parameter& copy = last.parameters().parameters()[last.parameters().tied_embeddings()[0]];
  EXPECT_TRUE(word.roles.copy_of.empty());
  EXPECT_EQ(copy.roles.copy_of, word.name);
  EXPECT_EQ(word.roles.vocab_axis, 0);
  EXPECT_EQ(copy.roles.vocab_axis, 0);
  int positions = 0, vocab_tables = 0;
  for (const auto& p : first.parameters().parameters()) {
    positions += p.roles.position_embedding;
    vocab_tables += p.roles.vocab_axis >= 0;
    EXPECT_EQ(p.weight_decay, p.shape.size() != 1) << p.name;  // no decay on biases and norm weights
  }
  EXPECT_EQ(positions, 1);
  EXPECT_EQ(vocab_tables, 1);
  // One stage holding both: the embedding is the output layer, no copy.
  models::GPTModel whole(config, 20, DType::f32, Device::cpu());
  ASSERT_EQ(whole.parameters().tied_embeddings().size(), 1u);
  for (const auto& p : whole.parameters().parameters()) EXPECT_TRUE(p.roles.copy_of.empty()) << p.name;
}

}  // namespace
}  // namespace tessera
