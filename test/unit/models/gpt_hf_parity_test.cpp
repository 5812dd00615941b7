// Hugging Face parity: the GPT-2 fixture's weights through our GPT give HF's logits (float32).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "shared_fixture.h"
#include "test_paths.h"
#include "tessera/ckpt/safetensors.h"
#include "tessera/models/gpt_hf_import.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

std::vector<int64_t> read_i64(const ckpt::SafetensorsFile& f, const std::string& name) {
  auto bytes = f.raw(name);
  EXPECT_EQ(f.info(name).dtype, "I64");
  std::vector<int64_t> v(bytes.size() / 8);
  std::memcpy(v.data(), bytes.data(), bytes.size());
  return v;
}

class GptHfParity : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::shared_dir() / "fixtures/hf/gpt2";
    TESSERA_REQUIRE_SHARED_FILE(dir_ / "hf/model.safetensors");
    TESSERA_REQUIRE_SHARED_FILE(dir_ / "expected.safetensors");
  }
  fs::path dir_;
};

TEST_F(GptHfParity, LogitsMatchHuggingFace) {
  auto hf = models::read_hf_gpt2_config((dir_ / "hf").string());
  models::GPTModel model(hf.model, hf.vocab_size, DType::f32, Device::cpu());
  models::load_hf_gpt2_weights(model, (dir_ / "hf").string());
  auto expected = ckpt::SafetensorsFile::open(dir_ / "expected.safetensors");
  auto ids = read_i64(expected, "input.input_ids");
  auto attention = read_i64(expected, "input.attention_mask");
  auto logits = expected.read_as_f32("output.logits");
  const auto& shape = expected.info("output.logits").shape;
  ASSERT_EQ(shape.size(), 3u);
  const int64_t rows = shape[0], seq = shape[1], vocab = shape[2];
  ASSERT_EQ(vocab, hf.vocab_size);

  for (int64_t row = 0; row < rows; ++row) {
    // The fixture's logits come from a plain forward without position_ids, where HF uses positions
    // 0..s-1 even for left-padded rows (only generate() derives them from the attention mask); the
    // padded keys are masked out of attention.
    std::vector<int32_t> row_ids(seq), positions(seq);
    std::vector<uint8_t> key_mask(seq);
    for (int64_t s = 0; s < seq; ++s) {
      row_ids[s] = static_cast<int32_t>(ids[row * seq + s]);
      key_mask[s] = static_cast<uint8_t>(attention[row * seq + s]);
      positions[s] = static_cast<int32_t>(s);
    }
    Arena arena(size_t(64) << 20);
    Tensor ours = model.forward_logits(arena, Tensor(row_ids.data(), DType::i32, {1, seq}),
                                       Tensor(key_mask.data(), DType::u8, {1, seq}),
                                       Tensor(positions.data(), DType::i32, {1, seq}));
    double max_diff = 0, max_ref = 0;
    int compared = 0;
    for (int64_t s = 0; s < seq; ++s) {
      if (!key_mask[s]) continue;  // logits at padded positions are not meaningful
      const float* a = ours.data_as<float>() + s * model.padded_vocab_size();
      const float* b = logits.data() + (row * seq + s) * vocab;
      for (int64_t v = 0; v < vocab; ++v) {
        max_diff = std::max(max_diff, static_cast<double>(std::abs(a[v] - b[v])));
        max_ref = std::max(max_ref, static_cast<double>(std::abs(b[v])));
      }
      ++compared;
    }
    ASSERT_GT(compared, 0);
    ASSERT_GT(max_ref, 0.0);
    EXPECT_LE(max_diff / max_ref, 1e-4) << "row " << row << ": max |diff| " << max_diff << " vs max |ref| " << max_ref;
  }
}

}  // namespace
}  // namespace tessera
