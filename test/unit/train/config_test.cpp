// Config parsing: defaults, overrides, and the errors a user meets (each a ConfigError naming the
// key and what is allowed).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tessera/core/error.h"
#include "tessera/train/config.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

class ConfigTest : public ::testing::Test {
 protected:
  std::string write(const std::string& text) {
    fs::path dir = fs::temp_directory_path() / ("tessera_config_test_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    fs::path path = dir / "config.toml";
    std::ofstream(path) << text;
    return path.string();
  }
  // The ConfigError message of loading `text` with overrides, or "" if it loads.
  std::string error_of(const std::string& text, std::vector<std::string> overrides = {}) {
    try {
      train::load_config(write(text), overrides);
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.exit_code(), 2);
      return e.message();
    }
    return "";
  }
};

const char* kMock = "[data]\nmock_data = true\nvocab_size = 100\n";

// A path the OS refuses to look up (a component longer than NAME_MAX) is a missing file named in a
// ConfigError, not a std::filesystem exception (found by fuzz_config).
TEST_F(ConfigTest, OverlongDataPathIsAMissingFileNotAFilesystemException) {
  const std::string prefix = std::string(300, 'R') + ".5";
  const std::string message =
      error_of("[data]\ndata_path = [\"" + prefix + "\"]\nvocab_file = \"v\"\nmerge_file = \"m\"\n");
  EXPECT_NE(message.find("data.data_path"), std::string::npos) << message;
  EXPECT_NE(message.find("does not exist"), std::string::npos) << message;
}

TEST_F(ConfigTest, DefaultsAndOverrides) {
  auto c = train::load_config(write(std::string(kMock) + "[model]\nhidden_size = 256\nnum_attention_heads = 8\n"),
                              {"training.train_iters=7", "optimizer.lr=1e-3", "data.tokenizer_type=NullTokenizer"});
  EXPECT_EQ(c.model.hidden_size, 256);
  EXPECT_EQ(c.model.ffn_hidden_size, 1024);          // derived: 4h
  EXPECT_EQ(c.model.num_query_groups, 8);            // derived: = heads
  EXPECT_EQ(c.training.train_iters, 7);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 1e-3);
  EXPECT_EQ(c.optimizer.lr_decay_iters, 7);          // derived: = train_iters
  EXPECT_EQ(c.data.tokenizer_type, "NullTokenizer");  // bare word taken as a string
  EXPECT_NE(c.to_toml().find("hidden_size = 256"), std::string::npos);
}

TEST_F(ConfigTest, UnknownKeySuggestsTheClosest) {
  auto msg = error_of(std::string(kMock) + "[model]\nhiden_size = 64\n");
  EXPECT_NE(msg.find("model.hiden_size"), std::string::npos) << msg;
  EXPECT_NE(msg.find("did you mean 'model.hidden_size'"), std::string::npos) << msg;
  EXPECT_NE(msg.find(":5:"), std::string::npos) << "line number expected: " << msg;
  auto set_msg = error_of(kMock, {"training.train_iter=5"});
  EXPECT_NE(set_msg.find("training.train_iters"), std::string::npos) << set_msg;
}

TEST_F(ConfigTest, WrongTypeNamesKeyAndType) {
  auto msg = error_of(std::string(kMock) + "[model]\nnum_layers = \"twelve\"\n");
  EXPECT_NE(msg.find("model.num_layers must be an integer, got string"), std::string::npos) << msg;
  auto bool_msg = error_of(kMock, {"data.mock_data=7"});
  EXPECT_NE(bool_msg.find("data.mock_data must be a boolean"), std::string::npos) << bool_msg;
}

TEST_F(ConfigTest, HiddenSizeMustDivideByHeads) {
  auto msg = error_of(std::string(kMock) + "[model]\nhidden_size = 100\nnum_attention_heads = 12\n");
  EXPECT_NE(msg.find("model.hidden_size = 100 is not divisible by model.num_attention_heads = 12"), std::string::npos)
      << msg;
}

TEST_F(ConfigTest, GlobalBatchMustBeAMultipleOfMicroBatch) {
  auto msg = error_of(std::string(kMock) + "[training]\nmicro_batch_size = 3\nglobal_batch_size = 10\n");
  EXPECT_NE(msg.find("training.global_batch_size = 10 is not a multiple of training.micro_batch_size = 3"),
            std::string::npos)
      << msg;
  EXPECT_NO_THROW(train::validate_for_world(train::load_config(write(kMock), {}), 1));
}

TEST_F(ConfigTest, SeqLengthAboveMaxPositions) {
  auto msg = error_of(std::string(kMock) + "[model]\nseq_length = 2048\nmax_position_embeddings = 1024\n");
  EXPECT_NE(msg.find("model.seq_length = 2048 is above model.max_position_embeddings = 1024"), std::string::npos)
      << msg;
}

TEST_F(ConfigTest, MissingDataFileIsNamed) {
  auto msg = error_of("[data]\ndata_path = [\"/nonexistent/corpus_text_document\"]\n");
  EXPECT_NE(msg.find("data.data_path"), std::string::npos) << msg;
  EXPECT_NE(msg.find("/nonexistent/corpus_text_document.bin"), std::string::npos) << msg;
}

// model.architecture = t5 defaults the layer keys to T5's (relative, rmsnorm, relu, no biases) unless
// the config sets them; other architectures keep the schema defaults; the T5 keys load.
TEST_F(ConfigTest, T5DefaultsItsLayerKeysAndLoadsItsKeys) {
  auto t5 = train::load_config(write(std::string(kMock) + "[model]\narchitecture = \"t5\"\nnum_decoder_layers = 3\n"
                                                          "kv_channels = 16\nrelative_attention_num_buckets = 16\n"
                                                          "relative_attention_max_distance = 64\n"),
                               {});
  EXPECT_EQ(t5.model.position_embedding_type, "relative");
  EXPECT_EQ(t5.model.normalization, "rmsnorm");
  EXPECT_EQ(t5.model.activation, "relu");
  EXPECT_FALSE(t5.model.add_bias_linear);
  EXPECT_EQ(t5.model.num_decoder_layers, 3);
  EXPECT_EQ(t5.model.kv_channels, 16);
  EXPECT_EQ(t5.model.relative_attention_num_buckets, 16);
  EXPECT_EQ(t5.model.relative_attention_max_distance, 64);
  auto geglu = train::load_config(write(std::string(kMock) + "[model]\narchitecture = \"t5\"\n"), {"model.activation=geglu"});
  EXPECT_EQ(geglu.model.activation, "geglu");
  auto gpt = train::load_config(write(kMock), {});
  EXPECT_EQ(gpt.model.position_embedding_type, "learned_absolute");
  EXPECT_EQ(gpt.model.normalization, "layernorm");
  EXPECT_EQ(gpt.model.activation, "gelu");
  EXPECT_TRUE(gpt.model.add_bias_linear);
}

TEST_F(ConfigTest, LaterCapabilitiesAreRejectedNotIgnored) {
  auto msg = error_of(std::string(kMock) + "[model]\nactivation = \"squared_relu\"\n");
  EXPECT_NE(msg.find("model.activation = \"squared_relu\" is not supported yet"), std::string::npos) << msg;
  // relu, geglu and relative positions load (T5 builds them); GPT and BERT reject them when built
  // (model_seam_test, bert_test).
  auto moe = error_of(kMock, {"model.num_experts=4", "model.architecture=t5"});
  EXPECT_NE(moe.find("model.num_experts = 4 is not supported yet by model.architecture = t5"), std::string::npos)
      << moe;
}

// The mixture-of-experts keys (docs/moe.md): they load, and each bad value names its key (exit 2).
TEST_F(ConfigTest, MoeKeysLoadAndBadValuesNameTheKey) {
  auto c = train::load_config(write(kMock), {"model.num_experts=8", "model.moe_router_topk=2",
                                             "model.moe_ffn_hidden_size=96", "model.moe_aux_loss_coeff=0.01",
                                             "model.moe_z_loss_coeff=0.001", "model.moe_router_score_function=sigmoid",
                                             "model.moe_expert_capacity_factor=1.5", "model.moe_layer_freq=2",
                                             "model.moe_shared_expert_intermediate_size=64"});
  EXPECT_EQ(c.model.num_experts, 8);
  EXPECT_EQ(c.model.expert_ffn_hidden_size(), 96);
  EXPECT_DOUBLE_EQ(c.model.moe_aux_loss_coeff, 0.01);
  EXPECT_EQ(c.model.moe_router_score_function, "sigmoid");
  EXPECT_DOUBLE_EQ(c.model.moe_expert_capacity_factor, 1.5);
  EXPECT_TRUE(c.model.is_moe_layer(0));
  EXPECT_FALSE(c.model.is_moe_layer(1));
  EXPECT_TRUE(c.model.is_moe_layer(2));
  EXPECT_EQ(c.model.moe_shared_expert_intermediate_size, 64);
  auto dense = train::load_config(write(kMock), {});
  EXPECT_EQ(dense.model.num_experts, 0);
  EXPECT_FALSE(dense.model.is_moe_layer(0));
  EXPECT_EQ(dense.model.expert_ffn_hidden_size(), dense.model.ffn_hidden_size);

  const std::pair<std::vector<std::string>, const char*> bad[] = {
      {{"model.num_experts=4", "model.moe_router_topk=5"}, "model.moe_router_topk = 5 must be in [1, model.num_experts = 4]"},
      {{"model.num_experts=4", "model.moe_router_topk=0"}, "model.moe_router_topk = 0"},
      {{"model.num_experts=-1"}, "model.num_experts = -1 must be >= 0"},
      {{"model.num_experts=4", "model.moe_aux_loss_coeff=-1"}, "model.moe_aux_loss_coeff must be >= 0"},
      {{"model.num_experts=4", "model.moe_z_loss_coeff=-1"}, "model.moe_z_loss_coeff must be >= 0"},
      {{"model.num_experts=4", "model.moe_expert_capacity_factor=-1"}, "model.moe_expert_capacity_factor"},
      {{"model.num_experts=4", "model.moe_pad_expert_input_to_capacity=true"},
       "model.moe_pad_expert_input_to_capacity = true needs model.moe_expert_capacity_factor > 0"},
      {{"model.num_experts=4", "model.moe_layer_freq=0"}, "model.moe_layer_freq = 0 must be >= 1"},
      {{"model.num_experts=4", "model.moe_router_score_function=sqrtsoftplus"}, "model.moe_router_score_function"},
      {{"model.num_experts=4", "model.moe_router_load_balancing_type=sinkhorn"}, "model.moe_router_load_balancing_type"},
      {{"model.num_experts=4", "parallel.expert_model_parallel_size=2", "training.device=cuda"},
       "parallel.expert_model_parallel_size = 2 is not supported yet with training.device = cuda"},
  };
  for (const auto& [overrides, message] : bad) {
    auto msg = error_of(kMock, overrides);
    EXPECT_NE(msg.find(message), std::string::npos) << "expected '" << message << "', got: " << msg;
  }
}

// The Llama-style keys (issue 15): accepted values load, bad values and combinations name the keys.
TEST_F(ConfigTest, LlamaStyleKeysLoadAndInvalidCombinationsNameTheKeys) {
  auto c = train::load_config(write(kMock), {"model.normalization=\"rmsnorm\"", "model.activation=\"swiglu\"",
                                             "model.position_embedding_type=\"rope\"", "model.rotary_base=500000.0",
                                             "model.rotary_percent=0.5", "model.norm_epsilon=1e-6",
                                             "model.untie_embeddings_and_output_weights=true",
                                             "model.add_bias_linear=false", "model.num_query_groups=4"});
  EXPECT_EQ(c.model.normalization, "rmsnorm");
  EXPECT_EQ(c.model.rotary_base, 500000.0);
  EXPECT_EQ(c.model.rotary_dim(), 32);  // head dim 64 x 0.5
  EXPECT_EQ(c.model.layernorm_epsilon, 1e-6);  // norm_epsilon overrides
  EXPECT_FALSE(c.model.add_bias_linear);
  EXPECT_EQ(c.model.num_query_groups, 4);
  auto mqa = train::load_config(write(kMock), {"model.attention_head_type=\"multiquery\""});
  EXPECT_EQ(mqa.model.num_query_groups, 1);
  const std::pair<std::vector<std::string>, std::vector<std::string>> bad[] = {
      {{"model.rotary_percent=0.0"}, {"model.rotary_percent", "(0, 1]"}},
      {{"model.rotary_percent=1.5"}, {"model.rotary_percent"}},
      {{"model.position_embedding_type=\"rope\"", "model.rotary_percent=0.01"}, {"model.rotary_percent", "2 dims"}},
      {{"model.rotary_base=0.0"}, {"model.rotary_base"}},
      {{"model.norm_epsilon=-1.0"}, {"model.norm_epsilon"}},
      {{"model.num_query_groups=5"}, {"model.num_query_groups = 5", "model.num_attention_heads"}},
      {{"model.attention_head_type=\"multiquery\"", "model.num_query_groups=4"},
       {"model.attention_head_type", "model.num_query_groups"}},
      {{"model.attention_head_type=\"grouped\""}, {"model.attention_head_type", "multihead, multiquery"}},
      {{"model.normalization=\"batchnorm\""}, {"model.normalization"}},
      {{"model.position_embedding_type=\"sinusoidal\""}, {"model.position_embedding_type"}},
  };
  for (const auto& [overrides, parts] : bad) {
    const std::string msg = error_of(kMock, overrides);
    for (const auto& part : parts) EXPECT_NE(msg.find(part), std::string::npos) << overrides[0] << ": " << msg;
  }
}

TEST_F(ConfigTest, SyntaxErrorNamesFileAndLine) {
  auto msg = error_of("[model]\nnum_layers = = 3\n");
  EXPECT_NE(msg.find("config.toml:2"), std::string::npos) << msg;
}

// training.precision unset: bf16 (INTERFACE.md), fp32 once the Trainer knows it runs on the CPU;
// an explicit value, bf16 included, is kept on the CPU.
TEST_F(ConfigTest, UnsetPrecisionIsBf16AndFp32OnTheCpu) {
  auto unset = train::load_config(write(kMock), {});
  EXPECT_EQ(unset.training.precision, "bf16");
  EXPECT_TRUE(unset.training.precision_defaulted);
  auto on_gpu = unset;
  train::resolve_default_precision(on_gpu, /*cuda=*/true);
  EXPECT_EQ(on_gpu.training.precision, "bf16");
  train::resolve_default_precision(unset, /*cuda=*/false);
  EXPECT_EQ(unset.training.precision, "fp32");
  EXPECT_EQ(std::get<std::string>(unset.values.at("training.precision")), "fp32");
  for (const char* explicit_value : {"bf16", "fp16", "fp32"}) {
    auto set = train::load_config(write(kMock), {std::string("training.precision=") + explicit_value});
    EXPECT_FALSE(set.training.precision_defaulted);
    train::resolve_default_precision(set, /*cuda=*/false);
    EXPECT_EQ(set.training.precision, explicit_value);
  }
  auto in_file = train::load_config(write(std::string(kMock) + "[training]\nprecision = \"bf16\"\n"), {});
  EXPECT_FALSE(in_file.training.precision_defaulted);
}

// tessera-config offers a string key's choices as its help lists them.
TEST_F(ConfigTest, AllowedChoicesComeFromTheSchemaHelp) {
  EXPECT_EQ(train::allowed_choices(*train::find_key("parallel", "recompute_granularity")),
            (std::vector<std::string>{"none", "selective", "full"}));
  EXPECT_EQ(train::allowed_choices(*train::find_key("model", "architecture")),
            (std::vector<std::string>{"gpt", "bert", "t5"}));
  EXPECT_EQ(train::allowed_choices(*train::find_key("training", "precision")),
            (std::vector<std::string>{"fp32", "bf16", "fp16"}));
  EXPECT_TRUE(train::allowed_choices(*train::find_key("optimizer", "lr_wsd_decay_style")).empty());
  EXPECT_TRUE(train::allowed_choices(*train::find_key("checkpoint", "save")).empty());
}

}  // namespace
}  // namespace tessera
