// The Hugging Face Llama family (LlamaForCausalLM: GQA, RoPE, SwiGLU, RMSNorm, untied lm_head)
// through the user path: the fixture imported by tessera-convert's import (single file and
// sharded, at TP=2 x PP=2), loaded into a whole GPTModel (resharded on load), gives HF's logits
// (fp32, normalised max difference <= 1e-4); exported back, every tensor equals the fixture's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "convert_test_support.h"
#include "tessera/ckpt/checkpoint_reader.h"
#include "tessera/ckpt/h5_file.h"
#include "tessera/ckpt/piece_index.h"
#include "tessera/convert/hf_export.h"
#include "tessera/convert/hf_family.h"
#include "tessera/convert/hf_import.h"
#include "tessera/convert/stored_config.h"
#include "tessera/core/buffer.h"
#include "tessera/models/gpt.h"
#include "tessera/train/training_checkpoints.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

// max |ours - HF| / max |HF| over every logit of the fixture's batch.
double normalised_logit_difference(const fs::path& checkpoint_folder, const fs::path& expected_file) {
  ckpt::CheckpointReader reader(checkpoint_folder);
  const int64_t vocab = reader.model_info().at("vocab_size");
  train::Config config =
      convert::conversion_config(convert::stored_keys(reader.config_toml(), {"model"}, "common.h5"), vocab);
  EXPECT_EQ(config.model.position_embedding_type, "rope");
  EXPECT_EQ(config.model.normalization, "rmsnorm");
  EXPECT_EQ(config.model.activation, "swiglu");
  EXPECT_TRUE(config.model.untie_embeddings_and_output_weights);
  EXPECT_FALSE(config.model.add_bias_linear);
  models::GPTModel model(config.model, vocab, DType::f32, Device::cpu());
  for (const ckpt::TensorShard& s : ckpt::model_shards(model.parameters())) reader.read_model(s);

  auto expected = ckpt::SafetensorsFile::open(expected_file);
  auto bytes = expected.raw("input.input_ids");
  std::vector<int64_t> ids(bytes.size() / 8);
  std::memcpy(ids.data(), bytes.data(), bytes.size());
  const auto logits = expected.read_as_f32("output.logits");
  const auto& s = expected.info("output.logits").shape;
  const int64_t rows = s[0], seq = s[1];
  EXPECT_EQ(s[2], vocab);
  double max_diff = 0, max_ref = 0;
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
  return max_diff / max_ref;
}

class ConvertLlama : public ::testing::TestWithParam<const char*> {};

TEST_P(ConvertLlama, ImportedCheckpointGivesHuggingFaceLogitsAndExportsBack) {
  const fs::path fixture = test::shared_hf_fixture("llama", GetParam());
  if (fixture.empty()) GTEST_SKIP() << "HF Llama fixture not found";
  test::ScratchDir dir;
  convert::LayoutOptions layout;
  layout.tensor_model_parallel_size = 2;  // 4 heads, 2 KV groups, ffn 192: split over 2 ranks
  layout.pipeline_model_parallel_size = 2;
  const auto imported = convert::import_hf(fixture, dir / "ckpt", layout);
  {  // the converter writes each group's piece index as the trainer's save does (ckpt/piece_index.h)
    ckpt::H5Id file = ckpt::h5_open_file_read((imported.folder / "mp_rank_01_001.h5").string());
    ckpt::H5Id model = ckpt::h5_open_group(file.get(), "model");
    EXPECT_TRUE(ckpt::read_piece_index(model.get(), ckpt::h5_list_links(model.get())).has_value());
  }
  const double diff = normalised_logit_difference(imported.folder, fixture.parent_path() / "expected.safetensors");
  EXPECT_LE(diff, 1e-4) << "normalised max |ours - HF| = " << diff;
  std::printf("llama logits: normalised max difference %.3g\n", diff);

  convert::ExportOptions options;
  convert::export_hf(dir / "ckpt", dir / "exported", options);
  test::expect_same_tensors(test::shared_hf_fixture("llama", "hf"), dir / "exported");
  const auto config = convert::read_hf_config_json((dir / "exported").string());
  EXPECT_EQ(config["model_type"], "llama");
  EXPECT_EQ(config["num_key_value_heads"], 2);
  EXPECT_EQ(config["tie_word_embeddings"], false);
}

INSTANTIATE_TEST_SUITE_P(Fixture, ConvertLlama, ::testing::Values("hf", "hf-sharded"),
                         [](const auto& info) { return std::string(info.param == std::string("hf") ? "Single" : "Sharded"); });

// What Tessera cannot represent is refused naming the file and field.
TEST(ConvertLlamaErrors, UnsupportedConfigFieldsAreNamed) {
  const fs::path fixture = test::shared_hf_fixture("llama", "hf");
  if (fixture.empty()) GTEST_SKIP() << "HF Llama fixture not found";
  std::ifstream in(fixture / "config.json");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto file = ckpt::SafetensorsFile::open(fixture / "model.safetensors");
  auto expect_refused = [&](const std::string& from, const std::string& to, const std::string& message) {
    test::ScratchDir dir;
    std::string edited = text;
    const auto at = edited.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    edited.replace(at, from.size(), to);
    test::write_hf_dir(dir / "hf", fixture, test::fixture_tensors(file), edited);
    try {
      convert::import_hf(dir / "hf", dir / "ckpt", convert::LayoutOptions{});
      ADD_FAILURE() << "import accepted " << to;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("config.json"), std::string::npos) << e.what();
    }
  };
  expect_refused("\"rope_type\": \"default\"", "\"rope_type\": \"llama3\"", "rope_type");
  expect_refused("\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu\"", "hidden_act");
  expect_refused("\"mlp_bias\": false", "\"mlp_bias\": true", "mlp_bias");
}

}  // namespace
}  // namespace tessera
