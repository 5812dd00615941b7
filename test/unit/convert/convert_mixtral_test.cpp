// The Hugging Face Mixtral family (MixtralForCausalLM: Llama attention + a top-2 mixture of SwiGLU
// experts in every layer) through tessera-convert's import / export, with expert parallelism: the
// repo's fixture (test/fixtures/hf/mixtral, made by test/tools/make_mixtral_fixture.py with
// transformers 5.17) imported at EP=2 (and TP=2, PP=2, EP=4) writes one mp_rank_TT_PPP_EEE file
// per EP rank holding only its experts; loaded into a whole GPTModel it gives HF's logits (fp32,
// max |difference| <= 1e-4); exported back every tensor equals the fixture's bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "convert_test_support.h"
#include "tessera/ckpt/checkpoint_reader.h"
#include "tessera/convert/hf_export.h"
#include "tessera/convert/hf_family.h"
#include "tessera/convert/hf_import.h"
#include "tessera/convert/inspect.h"
#include "tessera/convert/reshard.h"
#include "tessera/convert/stored_config.h"
#include "tessera/core/buffer.h"
#include "tessera/models/gpt.h"
#include "tessera/train/training_checkpoints.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

fs::path mixtral_fixture(const std::string& which) {
  const fs::path dir = test::source_dir() / "test/fixtures/hf/mixtral" / which;
  if (fs::exists(dir / "config.json")) return dir;
  if (test::fixtures_required()) ADD_FAILURE() << "HF Mixtral fixture missing: " << dir;
  return {};
}

// max |ours - HF| over every logit of the fixture's batch (max_ref: max |HF|).
double max_logit_difference(const fs::path& checkpoint_folder, const fs::path& expected_file, double& max_ref) {
  ckpt::CheckpointReader reader(checkpoint_folder);
  const int64_t vocab = reader.model_info().at("vocab_size");
  train::Config config =
      convert::conversion_config(convert::stored_keys(reader.config_toml(), {"model"}, "common.h5"), vocab);
  EXPECT_EQ(config.model.num_experts, 4);
  EXPECT_EQ(config.model.moe_router_topk, 2);
  EXPECT_EQ(config.model.moe_router_score_function, "softmax");
  EXPECT_FALSE(config.model.moe_router_pre_softmax);
  EXPECT_EQ(config.model.moe_expert_capacity_factor, 0.0);
  EXPECT_DOUBLE_EQ(config.model.rotary_base, 1e6);
  models::GPTModel model(config.model, vocab, DType::f32, Device::cpu());  // EP=1: every expert
  for (const ckpt::TensorShard& s : ckpt::model_shards(model.parameters())) reader.read_model(s);

  auto expected = ckpt::SafetensorsFile::open(expected_file);
  auto bytes = expected.raw("input.input_ids");
  std::vector<int64_t> ids(bytes.size() / 8);
  std::memcpy(ids.data(), bytes.data(), bytes.size());
  const auto logits = expected.read_as_f32("output.logits");
  const auto& s = expected.info("output.logits").shape;
  const int64_t rows = s[0], seq = s[1];
  EXPECT_EQ(s[2], vocab);
  double max_diff = 0;
  max_ref = 0;
  for (int64_t row = 0; row < rows; ++row) {
    std::vector<int32_t> row_ids(seq);
    for (int64_t t = 0; t < seq; ++t) row_ids[t] = static_cast<int32_t>(ids[row * seq + t]);
    Arena arena(size_t(64) << 20);
    Tensor ours = model.forward_logits(arena, Tensor(row_ids.data(), DType::i32, {1, seq}), Tensor(), Tensor());
    for (int64_t t = 0; t < seq; ++t) {
      const float* a = ours.data_as<float>() + t * model.padded_vocab_size();
      const float* b = logits.data() + (row * seq + t) * vocab;
      for (int64_t v = 0; v < vocab; ++v) {
        max_diff = std::max(max_diff, static_cast<double>(std::abs(a[v] - b[v])));
        max_ref = std::max(max_ref, static_cast<double>(std::abs(b[v])));
      }
    }
  }
  EXPECT_GT(max_ref, 0.0);
  return max_diff;
}

struct Case {
  const char* fixture;
  int64_t tp, pp, ep;
};
// A readable, stable parameter description in the test list (not the struct's bytes).
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.fixture << " TP=" << c.tp << " PP=" << c.pp << " EP=" << c.ep;
}

class ConvertMixtral : public ::testing::TestWithParam<Case> {};

TEST_P(ConvertMixtral, ImportAtExpertParallelGivesHfLogitsAndExportsBitwise) {
  const Case c = GetParam();
  const fs::path fixture = mixtral_fixture(c.fixture);
  if (fixture.empty()) GTEST_SKIP() << "HF Mixtral fixture not found";
  test::ScratchDir dir;
  convert::LayoutOptions layout;
  layout.tensor_model_parallel_size = c.tp;
  layout.pipeline_model_parallel_size = c.pp;
  layout.expert_model_parallel_size = c.ep;
  const auto imported = convert::import_hf(fixture, dir / "ckpt", layout);

  // One model file per (TP, PP, EP) rank; an expert's tensors only in its EP rank's files.
  int files = 0;
  for (const auto& entry : fs::directory_iterator(imported.folder))
    files += entry.path().filename().string().starts_with("mp_rank_");
  EXPECT_EQ(files, c.tp * c.pp * c.ep);
  ckpt::CheckpointReader reader(imported.folder);
  EXPECT_EQ(reader.saved_layout().ep_size, c.ep);
  int expert_tensors = 0;
  for (const auto& e : reader.tensors()) {
    const auto at = e.name.find(".mlp.experts.");
    if (e.name.find(".mlp.router.weight") != std::string::npos)
      EXPECT_EQ(static_cast<int64_t>(e.files.size()), c.tp * c.ep) << e.name;  // replicated on every EP rank
    if (at == std::string::npos) continue;
    ++expert_tensors;
    const int64_t expert = std::stoll(e.name.substr(at + 13));
    char suffix[16];
    std::snprintf(suffix, sizeof suffix, "_%03lld.h5", static_cast<long long>(expert / (4 / c.ep)));
    EXPECT_EQ(static_cast<int64_t>(e.files.size()), c.tp) << e.name;
    for (const std::string& f : e.files) EXPECT_TRUE(c.ep == 1 || f.ends_with(suffix)) << e.name << " in " << f;
  }
  EXPECT_EQ(expert_tensors, 2 * 4 * 2);  // layers x experts x (fc1, fc2)

  double max_ref = 0;
  const double diff = max_logit_difference(imported.folder, fixture.parent_path() / "expected.safetensors", max_ref);
  EXPECT_LE(diff, 1e-4) << "max |ours - HF| = " << diff;
  std::printf("mixtral TP=%lld PP=%lld EP=%lld logits: max |ours - HF| %.3g (max |HF| %.3g)\n",
              static_cast<long long>(c.tp), static_cast<long long>(c.pp), static_cast<long long>(c.ep), diff, max_ref);

  convert::ExportOptions options;
  convert::export_hf(dir / "ckpt", dir / "exported", options);
  test::expect_same_tensors(mixtral_fixture("hf"), dir / "exported");
  const auto config = convert::read_hf_config_json((dir / "exported").string());
  EXPECT_EQ(config["model_type"], "mixtral");
  EXPECT_EQ(config["num_local_experts"], 4);
  EXPECT_EQ(config["num_experts_per_tok"], 2);
  EXPECT_EQ(config["intermediate_size"], 96);
  EXPECT_EQ(config["num_key_value_heads"], 2);
  EXPECT_DOUBLE_EQ(config["rope_theta"].get<double>(), 1e6);
  EXPECT_DOUBLE_EQ(config["router_aux_loss_coef"].get<double>(), 0.02);
}

INSTANTIATE_TEST_SUITE_P(Fixture, ConvertMixtral,
                         ::testing::Values(Case{"hf", 2, 1, 2}, Case{"hf-sharded", 2, 2, 2}, Case{"hf", 1, 1, 4},
                                           Case{"hf-sharded", 1, 1, 1}),
                         [](const auto& info) {
                           const Case& c = info.param;
                           return std::string(c.fixture == std::string("hf") ? "Single" : "Sharded") + "Tp" +
                                  std::to_string(c.tp) + "Pp" + std::to_string(c.pp) + "Ep" + std::to_string(c.ep);
                         });

// Greedy decoding of the imported model (full forward per step) reproduces transformers' greedy
// generate output stored with the fixture.
TEST(ConvertMixtralGenerate, GreedyTokensEqualTransformers) {
  const fs::path fixture = mixtral_fixture("hf");
  if (fixture.empty()) GTEST_SKIP() << "HF Mixtral fixture not found";
  test::ScratchDir dir;
  convert::LayoutOptions layout;
  layout.expert_model_parallel_size = 2;
  const auto imported = convert::import_hf(fixture, dir / "ckpt", layout);
  ckpt::CheckpointReader reader(imported.folder);
  const int64_t vocab = reader.model_info().at("vocab_size");
  train::Config config =
      convert::conversion_config(convert::stored_keys(reader.config_toml(), {"model"}, "common.h5"), vocab);
  models::GPTModel model(config.model, vocab, DType::f32, Device::cpu());
  for (const ckpt::TensorShard& s : ckpt::model_shards(model.parameters())) reader.read_model(s);
  std::ifstream in(fixture.parent_path() / "expected.json");
  const nlohmann::json greedy = nlohmann::json::parse(in)["generate"]["greedy"];
  const auto prompts = greedy["kwargs"]["input_ids"].get<std::vector<std::vector<int32_t>>>();
  const auto expected = greedy["output_ids"].get<std::vector<std::vector<int32_t>>>();
  const int64_t new_tokens = greedy["kwargs"]["max_new_tokens"].get<int64_t>();
  ASSERT_EQ(prompts.size(), expected.size());
  for (size_t row = 0; row < prompts.size(); ++row) {
    std::vector<int32_t> ids = prompts[row];
    for (int64_t step = 0; step < new_tokens; ++step) {
      Arena arena(size_t(64) << 20);
      const auto seq = static_cast<int64_t>(ids.size());
      Tensor logits = model.forward_logits(arena, Tensor(ids.data(), DType::i32, {1, seq}), Tensor(), Tensor());
      const float* last = logits.data_as<float>() + (seq - 1) * model.padded_vocab_size();
      ids.push_back(static_cast<int32_t>(std::max_element(last, last + vocab) - last));
    }
    EXPECT_EQ(ids, expected[row]) << "row " << row;
  }
}

// tessera-convert reshard moves the imported experts between EP sizes: EP=1 -> TP=2 x EP=2 -> EP=4
// -> EP=1, each exported back bitwise equal to the fixture; EP=3 (4 experts) is refused.
TEST(ConvertMixtralReshard, ExpertsMoveBetweenEpSizesBitwise) {
  const fs::path fixture = mixtral_fixture("hf");
  if (fixture.empty()) GTEST_SKIP() << "HF Mixtral fixture not found";
  test::ScratchDir dir;
  convert::import_hf(fixture, dir / "ep1", convert::LayoutOptions{});
  struct Step {
    const char *from, *to;
    int64_t tp, ep;
  };
  for (const Step& s : {Step{"ep1", "tp2ep2", 2, 2}, Step{"tp2ep2", "ep4", 1, 4}, Step{"ep4", "back", 1, 1}}) {
    convert::LayoutOptions layout;
    layout.tensor_model_parallel_size = s.tp;
    layout.expert_model_parallel_size = s.ep;
    layout.data_parallel_size = s.ep;  // EP divides DP
    const auto r = convert::reshard(dir / s.from, std::nullopt, dir / s.to, layout, true);
    int files = 0;
    for (const auto& entry : fs::directory_iterator(r.folder))
      files += entry.path().filename().string().starts_with("mp_rank_");
    EXPECT_EQ(files, s.tp * s.ep) << s.to;
    EXPECT_EQ(ckpt::CheckpointReader(r.folder).saved_layout().ep_size, s.ep) << s.to;
    convert::export_hf(dir / s.to, dir / (std::string(s.to) + "-hf"), convert::ExportOptions{});
    test::expect_same_tensors(fixture, dir / (std::string(s.to) + "-hf"));
  }
  EXPECT_TRUE(fs::exists(dir / "tp2ep2/iter_0000000/mp_rank_01_000_001.h5"));
  convert::LayoutOptions bad;
  bad.expert_model_parallel_size = 3;
  EXPECT_THROW(convert::reshard(dir / "ep1", std::nullopt, dir / "ep3", bad, true), ConfigError);
}

// inspect lists every expert tensor of an EP checkpoint with the file (EP rank) holding it.
TEST(ConvertMixtralInspect, ListsExpertTensorsAndTheEpSize) {
  const fs::path fixture = mixtral_fixture("hf");
  if (fixture.empty()) GTEST_SKIP() << "HF Mixtral fixture not found";
  test::ScratchDir dir;
  convert::LayoutOptions layout;
  layout.expert_model_parallel_size = 2;
  convert::import_hf(fixture, dir / "ckpt", layout);
  std::ostringstream out;
  const int64_t listed = convert::inspect(dir / "ckpt", std::nullopt, out);
  const std::string text = out.str();
  EXPECT_NE(text.find("EP=2"), std::string::npos) << text;
  for (int e = 0; e < 4; ++e)
    for (const char* fc : {"linear_fc1", "linear_fc2"}) {
      const std::string name = "decoder.layers.1.mlp.experts." + std::to_string(e) + "." + fc + ".weight";
      const auto at = text.find(name);
      ASSERT_NE(at, std::string::npos) << name;
      const std::string line = text.substr(at, text.find('\n', at) - at);
      EXPECT_NE(line.find(e < 2 ? "mp_rank_00_000_000.h5" : "mp_rank_00_000_001.h5"), std::string::npos) << line;
    }
  EXPECT_NE(text.find("decoder.layers.0.mlp.router.weight"), std::string::npos);
  EXPECT_EQ(listed, 2 + 2 * (5 + 4 * 2) + 1);  // embedding, lm_head; per layer 5 + experts x 2; final norm
  std::ostringstream hf;
  convert::inspect(fixture, std::nullopt, hf);
  EXPECT_NE(hf.str().find("model.layers.1.block_sparse_moe.experts.3.w2.weight"), std::string::npos);
}

// What Tessera cannot represent, and EP sizes that do not fit, are refused naming the field / option.
TEST(ConvertMixtralErrors, UnsupportedFieldsAndEpSizesAreNamed) {
  const fs::path fixture = mixtral_fixture("hf");
  if (fixture.empty()) GTEST_SKIP() << "HF Mixtral fixture not found";
  std::ifstream in(fixture / "config.json");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto file = ckpt::SafetensorsFile::open(fixture / "model.safetensors");
  auto expect_refused = [&](const std::string& from, const std::string& to, const std::string& message,
                            int64_t ep = 1) {
    test::ScratchDir dir;
    std::string edited = text;
    const auto at = edited.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    edited.replace(at, from.size(), to);
    test::write_hf_dir(dir / "hf", fixture, test::fixture_tensors(file), edited);
    convert::LayoutOptions layout;
    layout.expert_model_parallel_size = ep;
    try {
      convert::import_hf(dir / "hf", dir / "ckpt", layout);
      ADD_FAILURE() << "import accepted " << to << " at EP=" << ep;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  };
  expect_refused("\"sliding_window\": null", "\"sliding_window\": 16", "sliding_window");
  expect_refused("\"router_jitter_noise\": 0.0", "\"router_jitter_noise\": 0.01", "router_jitter_noise");
  expect_refused("\"num_experts_per_tok\": 2", "\"num_experts_per_tok\": 5", "num_experts_per_tok");
  expect_refused("\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu\"", "hidden_act");
  expect_refused("\"rope_type\": \"default\"", "\"rope_type\": \"yarn\"", "rope_type");
  expect_refused("\"vocab_size\": 256", "\"vocab_size\": 256, \"norm_topk_prob\": false", "norm_topk_prob");
  expect_refused("\"vocab_size\": 256", "\"vocab_size\": 256, \"shared_expert_intermediate_size\": 64",
                 "shared_expert_intermediate_size");
  expect_refused("\"num_local_experts\": 4", "\"num_local_experts\": 4", "expert_model_parallel_size", 3);
  // A missing expert tensor names the tensor.
  test::ScratchDir dir;
  std::vector<ckpt::SafetensorsTensorData> tensors;
  for (const auto& t : test::fixture_tensors(file))
    if (t.name != "model.layers.1.block_sparse_moe.experts.2.w3.weight") tensors.push_back(t);
  test::write_hf_dir(dir / "hf", fixture, tensors);
  try {
    convert::import_hf(dir / "hf", dir / "ckpt", convert::LayoutOptions{});
    ADD_FAILURE() << "import accepted a missing expert tensor";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("experts.2.w3.weight"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera
