// Bad input to tessera-convert: a ConfigError (exit code 2) naming the file and the tensor, and
// nothing half-written left visible in the output folder.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include "convert_test_support.h"
#include "tessera/convert/hf_import.h"
#include "tessera/convert/reshard.h"
#include "tessera/core/error.h"

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

// import_hf fails with a ConfigError whose message holds every `parts`, and leaves `out` without
// a checkpoint, a tracker or a temporary folder.
void expect_import_error(const fs::path& hf, const fs::path& out, const convert::LayoutOptions& l,
                         const std::vector<std::string>& parts) {
  try {
    convert::import_hf(hf, out, l);
    ADD_FAILURE() << "import of " << hf << " succeeded";
  } catch (const ConfigError& e) {
    for (const auto& p : parts) EXPECT_NE(e.message().find(p), std::string::npos) << "'" << p << "' not in: " << e.message();
  }
  if (fs::exists(out))
    for (const auto& entry : fs::directory_iterator(out)) ADD_FAILURE() << "left behind: " << entry.path();
}

class ConvertErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    fixture_ = test::gpt2_fixture();
    if (fixture_.empty()) GTEST_SKIP() << "HF fixture not found";
    file_ = std::make_unique<ckpt::SafetensorsFile>(ckpt::SafetensorsFile::open(fixture_ / "model.safetensors"));
  }
  std::vector<ckpt::SafetensorsTensorData> tensors() const { return test::fixture_tensors(*file_); }
  fs::path fixture_;
  std::unique_ptr<ckpt::SafetensorsFile> file_;
  ScratchDir dir_;
};

TEST_F(ConvertErrors, MissingTensor) {
  auto t = tensors();
  std::erase_if(t, [](const auto& x) { return x.name == "transformer.h.1.mlp.c_fc.bias"; });
  test::write_hf_dir(dir_ / "hf", fixture_, t);
  expect_import_error(dir_ / "hf", dir_ / "out", layout(1, 1), {"model.safetensors", "transformer.h.1.mlp.c_fc.bias", "missing"});
}

TEST_F(ConvertErrors, ExtraTensor) {
  auto t = tensors();
  auto extra = t.front();
  extra.name = "transformer.h.2.ln_1.weight";
  t.push_back(extra);
  test::write_hf_dir(dir_ / "hf", fixture_, t);
  expect_import_error(dir_ / "hf", dir_ / "out", layout(1, 1), {"model.safetensors", "transformer.h.2.ln_1.weight", "unexpected"});
}

TEST_F(ConvertErrors, ShapeMismatchOfTheLastTensorLeavesNothing) {
  // wte is read last (the tied copy on the last stage), after every other tensor was written.
  const auto shape = test::fixture_shape(fixture_);
  auto t = tensors();
  for (auto& x : t)
    if (x.name == "transformer.ln_f.weight") {
      x.shape = {shape.hidden / 2};
      x.bytes = x.bytes.subspan(0, static_cast<size_t>(shape.hidden / 2) * 4);
    }
  test::write_hf_dir(dir_ / "hf", fixture_, t);
  expect_import_error(dir_ / "hf", dir_ / "out", layout(shape.tp, shape.pp),
                      {"model.safetensors", "transformer.ln_f.weight", shape_string({shape.hidden / 2}),
                       shape_string({shape.hidden})});
}

TEST_F(ConvertErrors, TruncatedSafetensors) {
  fs::create_directories(dir_ / "hf");
  fs::copy_file(fixture_ / "config.json", dir_ / "hf" / "config.json");
  fs::copy_file(fixture_ / "model.safetensors", dir_ / "hf" / "model.safetensors");
  fs::resize_file(dir_ / "hf" / "model.safetensors", fs::file_size(fixture_ / "model.safetensors") - 1000);
  expect_import_error(dir_ / "hf", dir_ / "out", layout(1, 1), {"model.safetensors", "truncated"});
}

TEST_F(ConvertErrors, UnsupportedDtype) {
  auto t = tensors();
  for (auto& x : t)
    if (x.name == "transformer.h.0.ln_2.bias") x.dtype = "I32";  // same byte count
  test::write_hf_dir(dir_ / "hf", fixture_, t);
  expect_import_error(dir_ / "hf", dir_ / "out", layout(1, 1), {"model.safetensors", "transformer.h.0.ln_2.bias", "I32"});
}

TEST_F(ConvertErrors, TensorParallelMustDivideHeads) {
  const auto shape = test::fixture_shape(fixture_);
  const int64_t tp = shape.heads % 3 == 0 ? 7 : 3;  // a size that does not divide the heads
  expect_import_error(fixture_, dir_ / "out", layout(tp, 1),
                      {"tensor_model_parallel_size = " + std::to_string(tp),
                       "num_attention_heads = " + std::to_string(shape.heads)});
}

TEST_F(ConvertErrors, PipelineMustFitTheLayers) {
  const auto shape = test::fixture_shape(fixture_);
  expect_import_error(fixture_, dir_ / "out", layout(1, shape.layers + 1), {"num_layers", std::to_string(shape.layers)});
  auto virt = layout(1, 2);
  virt.num_layers_per_virtual_pipeline_stage = shape.layers;  // L layers cannot make 2 stages x L layers
  expect_import_error(fixture_, dir_ / "out", virt, {"num_layers_per_virtual_pipeline_stage"});
}

TEST_F(ConvertErrors, UnknownModelTypeNamesItAndTheSupportedList) {
  std::ifstream in(fixture_ / "config.json");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  text.replace(text.find("\"gpt2\""), 6, "\"mamba\"");
  test::write_hf_dir(dir_ / "hf", fixture_, tensors(), text);
  expect_import_error(dir_ / "hf", dir_ / "out", layout(1, 1), {"config.json", "'mamba'", "supported: gpt2"});
}

TEST_F(ConvertErrors, ExistingOutputIsNotOverwritten) {
  convert::import_hf(fixture_, dir_ / "out", layout(1, 1));
  EXPECT_THROW(convert::import_hf(fixture_, dir_ / "out", layout(2, 1)), ConfigError);
  EXPECT_THROW(convert::reshard(dir_ / "out", std::nullopt, dir_ / "out", layout(1, 1), false), ConfigError);
}

// The executable: exit code 2 and the file and tensor on stderr; 0 for --help and --version.
TEST_F(ConvertErrors, ExecutableExitCodes) {
  const fs::path exe = test::bin_dir() / "tessera-convert";
  if (!fs::exists(exe)) {
    ADD_FAILURE() << exe << " not built";
    return;
  }
  auto run = [&](const std::string& args) {
    const std::string cmd = exe.string() + " " + args + " > " + (dir_ / "log").string() + " 2>&1";
    int status = std::system(cmd.c_str());
    std::ifstream in(dir_ / "log");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return std::make_pair(WIFEXITED(status) ? WEXITSTATUS(status) : -1, text);
  };
  auto [help, help_text] = run("--help");
  EXPECT_EQ(help, 0);
  for (const char* option : {"import-hf", "export-hf", "reshard", "inspect", "--tensor-model-parallel-size",
                             "--pipeline-model-parallel-size", "--num-layers-per-virtual-pipeline-stage",
                             "--params-dtype", "--make-vocab-size-divisible-by", "--max-shard-size", "--no-optim"})
    EXPECT_NE(help_text.find(option), std::string::npos) << option;
  EXPECT_EQ(run("--version").first, 0);
  auto t = tensors();
  std::erase_if(t, [](const auto& x) { return x.name == "transformer.wpe.weight"; });
  test::write_hf_dir(dir_ / "hf", fixture_, t);
  auto [code, text] = run("import-hf --input " + (dir_ / "hf").string() + " --output " + (dir_ / "out").string());
  EXPECT_EQ(code, 2) << text;
  EXPECT_NE(text.find("transformer.wpe.weight"), std::string::npos) << text;
  EXPECT_NE(text.find((dir_ / "hf" / "model.safetensors").string()), std::string::npos) << text;
  EXPECT_EQ(run("frobnicate").first, 2);
  EXPECT_EQ(run("import-hf --input " + fixture_.string()).first, 2);  // no --output
}

}  // namespace
}  // namespace tessera
