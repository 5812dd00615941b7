// The Hugging Face Megatron-BERT family (MegatronBertForPreTraining: token types, bidirectional
// attention with the padding mask, pre-LN layers, MLM and next-sentence heads) through the user
// path: the fixture imported by tessera-convert's import (single file and sharded) at TP=2 x PP=2,
// loaded into a whole BertModel, gives HF's MLM and NSP logits (fp32, normalised max difference
// <= 1e-4, over the real tokens); resharded to 1 x 1 and exported back, every tensor equals the
// fixture's byte for byte.
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
#include "tessera/models/bert.h"
#include "tessera/train/training_checkpoints.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

struct LogitDifference {
  double mlm = 0, nsp = 0;
};

// max |ours - HF| / max |HF| of the MLM logits (real tokens only: HF's logits at padded positions
// are not part of its result) and of the NSP logits.
LogitDifference normalised_logit_difference(const fs::path& checkpoint_folder, const fs::path& expected_file) {
  ckpt::CheckpointReader reader(checkpoint_folder);
  const int64_t vocab = reader.model_info().at("vocab_size");
  train::Config config =
      convert::conversion_config(convert::stored_keys(reader.config_toml(), {"model"}, "common.h5"), vocab);
  EXPECT_EQ(config.model.architecture, "bert");
  models::BertModel model(config.model, vocab, DType::f32, Device::cpu());
  for (const ckpt::TensorShard& s : ckpt::model_shards(model.parameters())) reader.read_model(s);

  auto expected = ckpt::SafetensorsFile::open(expected_file);
  std::vector<int32_t> ids = test::i64_as_i32(expected, "input.input_ids");
  std::vector<int32_t> types = test::i64_as_i32(expected, "input.token_type_ids");
  std::vector<int32_t> attention = test::i64_as_i32(expected, "input.attention_mask");
  const auto& shape = expected.info("input.input_ids").shape;
  const int64_t b = shape[0], s = shape[1];
  std::vector<uint8_t> padding(attention.begin(), attention.end());
  int64_t padded = 0;
  for (uint8_t p : padding) padded += p == 0;
  EXPECT_GT(padded, 0) << "the fixture should exercise the padding mask";
  Arena arena(size_t(64) << 20);
  auto [mlm, nsp] = model.forward_logits(arena, Tensor(ids.data(), DType::i32, {b, s}),
                                         Tensor(types.data(), DType::i32, {b, s}),
                                         Tensor(padding.data(), DType::u8, {b, s}));
  const auto hf_mlm = expected.read_as_f32("output.prediction_logits");
  const auto hf_nsp = expected.read_as_f32("output.seq_relationship_logits");
  EXPECT_EQ(expected.info("output.prediction_logits").shape[2], vocab);
  LogitDifference diff;
  double max_diff = 0, max_ref = 0;
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t t = 0; t < s; ++t) {
      if (!padding[static_cast<size_t>(bi * s + t)]) continue;
      const float* ours = mlm.data_as<float>() + (t * b + bi) * model.padded_vocab_size();
      const float* ref = hf_mlm.data() + (bi * s + t) * vocab;
      for (int64_t v = 0; v < vocab; ++v) {
        max_diff = std::max(max_diff, static_cast<double>(std::abs(ours[v] - ref[v])));
        max_ref = std::max(max_ref, static_cast<double>(std::abs(ref[v])));
      }
    }
  EXPECT_GT(max_ref, 0.0);
  diff.mlm = max_diff / max_ref;
  max_diff = max_ref = 0;
  for (int64_t i = 0; i < 2 * b; ++i) {
    max_diff = std::max(max_diff, static_cast<double>(std::abs(nsp.data_as<float>()[i] - hf_nsp[i])));
    max_ref = std::max(max_ref, static_cast<double>(std::abs(hf_nsp[i])));
  }
  EXPECT_GT(max_ref, 0.0);
  diff.nsp = max_diff / max_ref;
  return diff;
}

class ConvertBert : public ::testing::TestWithParam<const char*> {};

TEST_P(ConvertBert, ImportedCheckpointGivesHuggingFaceLogitsAndExportsBack) {
  const fs::path fixture = test::shared_hf_fixture("megatron-bert", GetParam());
  if (fixture.empty()) GTEST_SKIP() << "HF Megatron-BERT fixture not found";
  test::ScratchDir dir;
  convert::LayoutOptions layout;
  layout.tensor_model_parallel_size = 2;  // 4 heads, ffn 256
  layout.pipeline_model_parallel_size = 2;  // 2 layers
  const auto imported = convert::import_hf(fixture, dir / "ckpt", layout);
  const LogitDifference diff =
      normalised_logit_difference(imported.folder, fixture.parent_path() / "expected.safetensors");
  EXPECT_LE(diff.mlm, 1e-4) << "MLM logits: normalised max |ours - HF| = " << diff.mlm;
  EXPECT_LE(diff.nsp, 1e-4) << "NSP logits: normalised max |ours - HF| = " << diff.nsp;
  std::printf("megatron-bert logits: normalised max difference MLM %.3g, NSP %.3g\n", diff.mlm, diff.nsp);

  convert::LayoutOptions single;
  single.tensor_model_parallel_size = 1;
  single.pipeline_model_parallel_size = 1;
  convert::reshard(dir / "ckpt", std::nullopt, dir / "single", single, true);
  convert::ExportOptions options;
  convert::export_hf(dir / "single", dir / "exported", options);
  test::expect_same_tensors(test::shared_hf_fixture("megatron-bert", "hf"), dir / "exported");
  const auto config = convert::read_hf_config_json((dir / "exported").string());
  EXPECT_EQ(config["model_type"], "megatron-bert");
  EXPECT_EQ(config["vocab_size"], 1000);
  EXPECT_EQ(config["type_vocab_size"], 2);
}

INSTANTIATE_TEST_SUITE_P(Fixture, ConvertBert, ::testing::Values("hf", "hf-sharded"),
                         [](const auto& info) { return std::string(info.param == std::string("hf") ? "Single" : "Sharded"); });

TEST(ConvertBertErrors, UnsupportedConfigFieldsAreNamed) {
  int64_t vocab = 0;
  nlohmann::json c = convert::read_hf_config_json(test::shared_hf_fixture("megatron-bert", "hf").string());
  c["hidden_act"] = "relu";
  try {
    models::megatron_bert_model_keys_from_hf(c, "x/config.json", vocab);
    ADD_FAILURE() << "hidden_act relu accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("hidden_act"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera
