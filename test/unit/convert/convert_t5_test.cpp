// The Hugging Face T5 family (T5ForConditionalGeneration: relative position buckets, RMS
// LayerNorm, cross-attention, tied output with d_model^-0.5 scaling) through the user path: the
// fixture imported by tessera-convert's import (single file at TP=1, sharded files at TP=2), loaded
// into a whole T5Model, gives HF's decoder logits for the fixture's encoder and decoder inputs (fp32,
// max |ours - HF| <= 1e-4); the TP=2 import resharded to TP=1 and exported back equals the fixture
// byte for byte.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "convert_test_support.h"
#include "tessera/ckpt/checkpoint_reader.h"
#include "tessera/convert/hf_export.h"
#include "tessera/convert/hf_family.h"
#include "tessera/convert/hf_import.h"
#include "tessera/convert/reshard.h"
#include "tessera/convert/stored_config.h"
#include "tessera/core/buffer.h"
#include "tessera/models/t5.h"
#include "tessera/train/training_checkpoints.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

// max |ours - HF| over the decoder logits of the fixture's inputs, and max |HF|.
std::pair<double, double> logit_difference(const fs::path& checkpoint_folder, const fs::path& expected_file) {
  ckpt::CheckpointReader reader(checkpoint_folder);
  const int64_t vocab = reader.model_info().at("vocab_size");
  train::Config config =
      convert::conversion_config(convert::stored_keys(reader.config_toml(), {"model"}, "common.h5"), vocab);
  EXPECT_EQ(config.model.architecture, "t5");
  models::T5Model model(config.model, vocab, DType::f32, Device::cpu());
  for (const ckpt::TensorShard& s : ckpt::model_shards(model.parameters())) reader.read_model(s);

  auto expected = ckpt::SafetensorsFile::open(expected_file);
  std::vector<int32_t> ids = test::i64_as_i32(expected, "input.input_ids");
  std::vector<int32_t> decoder = test::i64_as_i32(expected, "input.decoder_input_ids");
  const auto& shape = expected.info("input.input_ids").shape;
  const auto& dshape = expected.info("input.decoder_input_ids").shape;
  const int64_t b = shape[0], s = shape[1], sd = dshape[1];
  Arena arena(size_t(64) << 20);
  Tensor logits = model.forward_logits(arena, Tensor(ids.data(), DType::i32, {b, s}), Tensor(),
                                       Tensor(decoder.data(), DType::i32, {b, sd}), Tensor());
  const auto hf = expected.read_as_f32("output.logits");
  EXPECT_EQ(expected.info("output.logits").shape[2], vocab);
  double max_diff = 0, max_ref = 0;
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t t = 0; t < sd; ++t) {
      const float* ours = logits.data_as<float>() + (t * b + bi) * model.padded_vocab_size();
      const float* ref = hf.data() + (bi * sd + t) * vocab;
      for (int64_t v = 0; v < vocab; ++v) {
        max_diff = std::max(max_diff, static_cast<double>(std::abs(ours[v] - ref[v])));
        max_ref = std::max(max_ref, static_cast<double>(std::abs(ref[v])));
      }
    }
  return {max_diff, max_ref};
}

struct Case {
  const char* fixture;
  int64_t tp;
};

class ConvertT5 : public ::testing::TestWithParam<Case> {};

TEST_P(ConvertT5, ImportedCheckpointGivesHuggingFaceLogitsAndExportsBack) {
  const fs::path fixture = test::shared_hf_fixture("t5", GetParam().fixture);
  if (fixture.empty()) GTEST_SKIP() << "HF T5 fixture not found";
  test::ScratchDir dir;
  convert::LayoutOptions layout;
  layout.tensor_model_parallel_size = GetParam().tp;  // 4 heads, d_ff 128
  layout.pipeline_model_parallel_size = 1;
  const auto imported = convert::import_hf(fixture, dir / "ckpt", layout);
  const auto [diff, ref] = logit_difference(imported.folder, fixture.parent_path() / "expected.safetensors");
  EXPECT_GT(ref, 0.0);
  EXPECT_LE(diff, 1e-4) << "decoder logits: max |ours - HF| = " << diff << " (max |HF| " << ref << ")";
  std::printf("t5 logits (TP=%lld import): max |ours - HF| %.3g, max |HF| %.3g\n",
              static_cast<long long>(GetParam().tp), diff, ref);

  convert::LayoutOptions single;
  single.tensor_model_parallel_size = 1;
  single.pipeline_model_parallel_size = 1;
  convert::reshard(dir / "ckpt", std::nullopt, dir / "single", single, true);
  convert::ExportOptions options;
  convert::export_hf(dir / "single", dir / "exported", options);
  test::expect_same_tensors(test::shared_hf_fixture("t5", "hf"), dir / "exported");
  const auto config = convert::read_hf_config_json((dir / "exported").string());
  EXPECT_EQ(config["model_type"], "t5");
  EXPECT_EQ(config["vocab_size"], 1000);
  EXPECT_EQ(config["d_kv"], 16);
  EXPECT_EQ(config["feed_forward_proj"], "relu");
  EXPECT_EQ(config["tie_word_embeddings"], true);
}

INSTANTIATE_TEST_SUITE_P(Fixture, ConvertT5, ::testing::Values(Case{"hf", 1}, Case{"hf", 2}, Case{"hf-sharded", 2}),
                         [](const auto& info) {
                           return std::string(info.param.fixture == std::string("hf") ? "Single" : "Sharded") +
                                  "Tp" + std::to_string(info.param.tp);
                         });

TEST(ConvertT5Errors, UnsupportedConfigFieldsAreNamed) {
  int64_t vocab = 0;
  const fs::path fixture = test::shared_hf_fixture("t5", "hf");
  if (fixture.empty()) GTEST_SKIP() << "HF T5 fixture not found";
  nlohmann::json c = convert::read_hf_config_json(fixture.string());
  c["feed_forward_proj"] = "gated-silu";
  try {
    models::t5_model_keys_from_hf(c, "x/config.json", vocab);
    ADD_FAILURE() << "feed_forward_proj gated-silu accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("feed_forward_proj"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera
