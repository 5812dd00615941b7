// The name map and layout transforms are right, not just self-inverse: the HF GPT-2 fixture imported
// at TP=2 x PP=2 and loaded (resharded on load) into a whole GPTModel gives HF's expected logits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "convert_test_support.h"
#include "tessera/ckpt/checkpoint_reader.h"
#include "tessera/train/training_checkpoints.h"
#include "tessera/convert/hf_import.h"
#include "tessera/convert/stored_config.h"
#include "tessera/core/buffer.h"
#include "tessera/models/gpt.h"

namespace tessera {
namespace {

TEST(ConvertLogits, ImportedCheckpointGivesHuggingFaceLogits) {
  const auto fixture = test::gpt2_fixture();
  if (fixture.empty()) GTEST_SKIP() << "HF fixture not found";
  const auto shape = test::fixture_shape(fixture);
  test::ScratchDir dir;
  convert::LayoutOptions layout;
  layout.tensor_model_parallel_size = shape.tp;
  layout.pipeline_model_parallel_size = shape.pp;
  auto imported = convert::import_hf(fixture, dir / "ckpt", layout);

  ckpt::CheckpointReader reader(imported.folder);
  const int64_t vocab = reader.model_info().at("vocab_size");
  train::Config config = convert::conversion_config(
      convert::stored_keys(reader.config_toml(), {"model"}, "common.h5"), vocab);
  models::GPTModel model(config.model, vocab, DType::f32, Device::cpu());
  for (const ckpt::TensorShard& s : ckpt::model_shards(model.parameters())) reader.read_model(s);

  auto expected = ckpt::SafetensorsFile::open(fixture.parent_path() / "expected.safetensors");
  auto i64 = [&](const char* name) {
    auto bytes = expected.raw(name);
    std::vector<int64_t> v(bytes.size() / 8);
    std::memcpy(v.data(), bytes.data(), bytes.size());
    return v;
  };
  const auto ids = i64("input.input_ids"), attention = i64("input.attention_mask");
  const auto logits = expected.read_as_f32("output.logits");
  const auto& s = expected.info("output.logits").shape;
  const int64_t rows = s[0], seq = s[1];
  ASSERT_EQ(s[2], vocab);
  double max_diff = 0, max_ref = 0;
  for (int64_t row = 0; row < rows; ++row) {
    std::vector<int32_t> row_ids(seq), positions(seq);
    std::vector<uint8_t> key_mask(seq);
    for (int64_t t = 0; t < seq; ++t) {
      row_ids[t] = static_cast<int32_t>(ids[row * seq + t]);
      key_mask[t] = static_cast<uint8_t>(attention[row * seq + t]);
      positions[t] = static_cast<int32_t>(t);  // HF's plain forward: positions 0..s-1
    }
    Arena arena(size_t(64) << 20);
    Tensor ours = model.forward_logits(arena, Tensor(row_ids.data(), DType::i32, {1, seq}),
                                       Tensor(key_mask.data(), DType::u8, {1, seq}),
                                       Tensor(positions.data(), DType::i32, {1, seq}));
    for (int64_t t = 0; t < seq; ++t) {
      if (!key_mask[t]) continue;
      const float* a = ours.data_as<float>() + t * model.padded_vocab_size();
      const float* b = logits.data() + (row * seq + t) * vocab;
      for (int64_t v = 0; v < vocab; ++v) {
        max_diff = std::max(max_diff, static_cast<double>(std::abs(a[v] - b[v])));
        max_ref = std::max(max_ref, static_cast<double>(std::abs(b[v])));
      }
    }
  }
  ASSERT_GT(max_ref, 0.0);
  EXPECT_LE(max_diff, 1e-4) << "max |ours - HF| " << max_diff << " (max |HF| " << max_ref << ")";
}

}  // namespace
}  // namespace tessera
