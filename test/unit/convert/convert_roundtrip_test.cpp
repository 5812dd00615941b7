// Round trips through tessera-convert's operations on the HF GPT-2 fixture: import at TP=2 x PP=2
// (and other layouts), reshard to TP=1 x PP=1, export; every tensor must come back bit for bit
// (fp32), from the single file and from a sharded copy.
#include <gtest/gtest.h>

#include "convert_test_support.h"
#include "tessera/ckpt/checkpoint_reader.h"
#include "tessera/convert/hf_export.h"
#include "tessera/convert/hf_import.h"
#include "tessera/convert/inspect.h"
#include "tessera/convert/reshard.h"

namespace tessera {
namespace {

using test::ScratchDir;
namespace fs = std::filesystem;

convert::LayoutOptions layout(int64_t tp, int64_t pp) {
  convert::LayoutOptions l;
  l.tensor_model_parallel_size = tp;
  l.pipeline_model_parallel_size = pp;
  return l;
}

TEST(ConvertRoundTrip, ImportTp2Pp2ReshardTp1ExportIsBitwiseEqual) {
  const auto fixture = test::gpt2_fixture();
  if (fixture.empty()) GTEST_SKIP() << "HF fixture not found";
  const auto shape = test::fixture_shape(fixture);
  ScratchDir dir;
  auto imported = convert::import_hf(fixture, dir / "tp2pp2", layout(shape.tp, shape.pp));
  EXPECT_EQ(imported.folder, dir / "tp2pp2" / "iter_0000000");
  // The imported checkpoint has every shard file of the layout and the padded vocabulary.
  EXPECT_TRUE(fs::exists(imported.folder / "common.h5"));
  for (int tp = 0; tp < shape.tp; ++tp)
    for (int pp = 0; pp < shape.pp; ++pp) {
      char name[32];
      std::snprintf(name, sizeof name, "mp_rank_%02d_%03d.h5", tp, pp);
      EXPECT_TRUE(fs::exists(imported.folder / name)) << name;
    }
  ckpt::CheckpointReader reader(imported.folder);
  EXPECT_EQ(reader.saved_layout().tp_size, shape.tp);
  EXPECT_EQ(reader.saved_layout().pp_size, shape.pp);
  const int64_t multiple = 128 * shape.tp;
  EXPECT_EQ(reader.model_info().at("padded_vocab_size"), (shape.vocab + multiple - 1) / multiple * multiple);
  EXPECT_EQ(reader.has("param", "output_layer.weight"), shape.pp > 1);  // the last stage's tied copy

  convert::reshard(dir / "tp2pp2", std::nullopt, dir / "tp1", layout(1, 1), false);
  convert::ExportOptions options;
  convert::export_hf(dir / "tp1", dir / "hf", options);
  test::expect_same_tensors(fixture, dir / "hf");
  EXPECT_TRUE(fs::exists(dir / "hf" / "config.json"));
  EXPECT_TRUE(fs::exists(dir / "hf" / "generation_config.json"));
  EXPECT_FALSE(fs::exists(dir / "hf" / "model.safetensors.index.json"));
}

TEST(ConvertRoundTrip, ShardedInputWorksLikeTheSingleFile) {
  const auto fixture = test::gpt2_fixture();
  if (fixture.empty()) GTEST_SKIP() << "HF fixture not found";
  const auto shape = test::fixture_shape(fixture);
  ScratchDir dir;
  convert::import_hf(fixture, dir / "tp1", layout(1, 1));
  convert::ExportOptions small;
  small.max_shard_bytes = convert::parse_size("200KB");
  const auto sharded = convert::export_hf(dir / "tp1", dir / "sharded", small);
  EXPECT_GT(sharded.shards, 1);
  EXPECT_TRUE(fs::exists(dir / "sharded" / "model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(dir / "sharded" / "model.safetensors"));
  test::expect_same_tensors(fixture, dir / "sharded");

  convert::import_hf(dir / "sharded", dir / "tp2pp2", layout(shape.tp, shape.pp));
  convert::reshard(dir / "tp2pp2", std::nullopt, dir / "back", layout(1, 1), false);
  convert::export_hf(dir / "back", dir / "hf", convert::ExportOptions{});
  test::expect_same_tensors(fixture, dir / "hf");
}

TEST(ConvertRoundTrip, OtherLayoutsAndDtypes) {
  const auto fixture = test::gpt2_fixture();
  if (fixture.empty()) GTEST_SKIP() << "HF fixture not found";
  const auto shape = test::fixture_shape(fixture);
  ScratchDir dir;
  // The most tensor-parallel split the heads allow, with the layers over as many stages as they divide.
  const int64_t tp = shape.heads % 4 == 0 ? 4 : shape.heads;
  convert::import_hf(fixture, dir / "tp4pp2", layout(tp, shape.pp));
  convert::reshard(dir / "tp4pp2", std::nullopt, dir / "tp2", layout(shape.tp, 1), false);
  convert::export_hf(dir / "tp2", dir / "hf", convert::ExportOptions{});
  test::expect_same_tensors(fixture, dir / "hf");

  // bf16 storage: a bf16 export of a bf16 checkpoint equals rounding the fp32 export.
  auto bf16 = layout(1, 1);
  bf16.params_dtype = "bf16";
  convert::reshard(dir / "tp2", std::nullopt, dir / "bf16", bf16, false);
  ckpt::CheckpointReader reader(dir / "bf16" / "iter_0000000");
  for (const auto& e : reader.tensors()) EXPECT_EQ(e.dtype, DType::bf16) << e.name;
  convert::ExportOptions b;
  b.params_dtype = "bf16";
  convert::export_hf(dir / "bf16", dir / "hf-bf16", b);
  auto st = ckpt::SafetensorsCheckpoint::open(dir / "hf-bf16");
  auto original = ckpt::SafetensorsCheckpoint::open(fixture);
  auto w = st.read_as_f32("transformer.h.1.mlp.c_fc.weight");
  auto o = original.read_as_f32("transformer.h.1.mlp.c_fc.weight");
  ASSERT_EQ(w.size(), o.size());
  for (size_t i = 0; i < w.size(); ++i) ASSERT_EQ(w[i], bf16_to_float(float_to_bf16(o[i]))) << i;
}

TEST(ConvertRoundTrip, InspectListsEveryTensor) {
  const auto fixture = test::gpt2_fixture();
  if (fixture.empty()) GTEST_SKIP() << "HF fixture not found";
  const auto shape = test::fixture_shape(fixture);
  ScratchDir dir;
  std::ostringstream hf;
  EXPECT_EQ(convert::inspect(fixture, std::nullopt, hf), shape.hf_tensors());
  EXPECT_NE(hf.str().find("transformer.wte.weight"), std::string::npos);
  EXPECT_NE(hf.str().find(shape_string({shape.vocab, shape.hidden})), std::string::npos);
  convert::import_hf(fixture, dir / "ckpt", layout(shape.tp, shape.pp));
  std::ostringstream t;
  // The HF tensors + the last stage's output_layer.weight copy.
  EXPECT_EQ(convert::inspect(dir / "ckpt", std::nullopt, t), shape.hf_tensors() + (shape.pp > 1 ? 1 : 0));
  EXPECT_NE(t.str().find("embedding.word_embeddings.weight"), std::string::npos);
  const int64_t multiple = 128 * shape.tp, padded = (shape.vocab + multiple - 1) / multiple * multiple;
  EXPECT_NE(t.str().find(shape_string({padded, shape.hidden})), std::string::npos);
  EXPECT_NE(t.str().find("TP=" + std::to_string(shape.tp) + " PP=" + std::to_string(shape.pp)), std::string::npos);
}

}  // namespace
}  // namespace tessera
