// safetensors reader / writer: the shared Hugging Face fixtures (GPT-2 single file, Llama sharded
// vs single), writer -> reader round trips, and corrupted files whose errors must name the file.
#include "tessera/ckpt/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tessera/core/error.h"
#include "tessera/core/half.h"
#include "shared_fixture.h"
#include "test_paths.h"

namespace tessera::ckpt {
namespace {

namespace fs = std::filesystem;

// TESSERA_SHARED_DIR, else the folder CMake compiled in (../shared next to the checkout).
fs::path shared_dir() { return test::shared_dir(); }

// A fresh directory per test, removed afterwards.
class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("tessera_safetensors_" + std::to_string(getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes 8-byte length + header + data; header_len overrides the length field when >= 0.
  fs::path write_raw(const std::string& file, const std::string& header, const std::string& data,
                     int64_t header_len = -1) {
    fs::path path = dir_ / file;
    std::ofstream out(path, std::ios::binary);
    uint64_t n = header_len >= 0 ? static_cast<uint64_t>(header_len) : header.size();
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << header << data;
    return path;
  }

  // The error message of opening path, or "" when it opens.
  static std::string open_error(const fs::path& path) {
    try {
      SafetensorsFile::open(path);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  }

  fs::path dir_;
};

template <typename T>
std::span<const std::byte> bytes_of(const std::vector<T>& v) {
  return std::as_bytes(std::span<const T>(v));
}

// ---------------------------------------------------------------------------------------------
// Shared fixtures

TEST(SafetensorsFixture, Gpt2NamesAndShapesFollowItsConfig) {
  const fs::path hf = shared_dir() / "fixtures/hf/gpt2/hf";
  TESSERA_REQUIRE_SHARED_FILE(hf / "model.safetensors");
  nlohmann::json config = nlohmann::json::parse(std::ifstream(hf / "config.json"));
  const int64_t h = config["n_embd"], vocab = config["vocab_size"], positions = config["n_positions"];
  const int64_t layers = config["n_layer"];
  const int64_t inner = config["n_inner"].is_null() ? 4 * h : config["n_inner"].get<int64_t>();

  SafetensorsFile file = SafetensorsFile::open(hf / "model.safetensors");
  EXPECT_EQ(file.metadata().at("format"), "pt");
  EXPECT_EQ(file.info("transformer.wte.weight").shape, (Shape{vocab, h}));
  EXPECT_EQ(file.info("transformer.wte.weight").shape, (Shape{50257, 32}));
  EXPECT_EQ(file.info("transformer.wpe.weight").shape, (Shape{positions, h}));
  EXPECT_EQ(file.info("transformer.ln_f.weight").shape, (Shape{h}));
  for (int64_t l = 0; l < layers; ++l) {
    const std::string p = "transformer.h." + std::to_string(l) + ".";
    EXPECT_EQ(file.info(p + "attn.c_attn.weight").shape, (Shape{h, 3 * h}));  // Conv1D: [in, out]
    EXPECT_EQ(file.info(p + "attn.c_attn.bias").shape, (Shape{3 * h}));
    EXPECT_EQ(file.info(p + "attn.c_proj.weight").shape, (Shape{h, h}));
    EXPECT_EQ(file.info(p + "mlp.c_fc.weight").shape, (Shape{h, inner}));
    EXPECT_EQ(file.info(p + "mlp.c_proj.weight").shape, (Shape{inner, h}));
    EXPECT_EQ(file.info(p + "ln_1.weight").dtype, "F32");
  }
  EXPECT_EQ(file.names().size(), static_cast<size_t>(12 * layers + 4));  // + wte, wpe, ln_f.{weight,bias}
  EXPECT_FALSE(file.contains("lm_head.weight"));                        // tied: HF does not store it

  std::vector<float> wte = file.read_as_f32("transformer.wte.weight");
  ASSERT_EQ(wte.size(), static_cast<size_t>(vocab * h));
  std::span<const std::byte> raw = file.raw("transformer.wte.weight");
  ASSERT_EQ(raw.size(), wte.size() * 4);
  EXPECT_EQ(std::memcmp(raw.data(), wte.data(), raw.size()), 0);
  double sum_sq = 0;
  for (float v : wte) sum_sq += double(v) * v;
  EXPECT_GT(sum_sq, 0.0);  // real weights, not zeros

  SafetensorsCheckpoint checkpoint = SafetensorsCheckpoint::open(hf);
  EXPECT_FALSE(checkpoint.sharded());
  EXPECT_EQ(checkpoint.names(), file.names());
}

TEST(SafetensorsFixture, LlamaShardedEqualsSingleFile) {
  const fs::path llama = shared_dir() / "fixtures/hf/llama";
  TESSERA_REQUIRE_SHARED_FILE(llama / "hf-sharded/model.safetensors.index.json");
  TESSERA_REQUIRE_SHARED_FILE(llama / "hf/model.safetensors");
  SafetensorsCheckpoint single = SafetensorsCheckpoint::open(llama / "hf");
  SafetensorsCheckpoint sharded = SafetensorsCheckpoint::open(llama / "hf-sharded");
  EXPECT_FALSE(single.sharded());
  EXPECT_TRUE(sharded.sharded());
  EXPECT_EQ(sharded.files().size(), 4u);
  ASSERT_EQ(sharded.names(), single.names());
  EXPECT_TRUE(sharded.contains("model.embed_tokens.weight"));
  EXPECT_EQ(sharded.info("model.embed_tokens.weight").shape, (Shape{1000, 64}));
  for (const std::string& name : single.names()) {
    EXPECT_EQ(sharded.info(name).shape, single.info(name).shape) << name;
    EXPECT_EQ(sharded.info(name).dtype, single.info(name).dtype) << name;
    EXPECT_EQ(sharded.read_as_f32(name), single.read_as_f32(name)) << name;
  }
  // Opening the index file itself works as well.
  EXPECT_EQ(SafetensorsCheckpoint::open(llama / "hf-sharded/model.safetensors.index.json").names(), single.names());
}

// ---------------------------------------------------------------------------------------------
// Writer -> reader

TEST_F(SafetensorsTest, RoundTripEveryKindOfTensor) {
  const std::vector<float> f32 = {1.0f, -2.5f, 3.25f, 0.0f, 1e-3f, 7.0f};
  const std::vector<double> f64 = {0.1, -0.2, 1e300};
  std::vector<uint16_t> bf16_bits, f16_bits;
  for (float v : {1.5f, -2.0f, 0.15625f}) {
    bf16_bits.push_back(float_to_bf16(v).bits);
    f16_bits.push_back(float_to_f16(v).bits);
  }
  const std::vector<int64_t> i64 = {1, -2, 1ll << 40};
  const std::vector<uint8_t> flags = {1, 0, 1};  // 3 bytes: the next tensor would be misaligned without ordering
  const std::vector<float> scalar = {42.0f};
  const std::vector<float> empty;
  const fs::path path = dir_ / "model.safetensors";
  write_safetensors(path, {{"w", "F32", {2, 3}, bytes_of(f32)},
                           {"flags", "BOOL", {3}, bytes_of(flags)},
                           {"half", "F16", {3}, bytes_of(f16_bits)},
                           {"brain", "BF16", {3}, bytes_of(bf16_bits)},
                           {"doubles", "F64", {3}, bytes_of(f64)},
                           {"ids", "I64", {3}, bytes_of(i64)},
                           {"scalar", "F32", {}, bytes_of(scalar)},
                           {"empty", "F32", {0, 4}, bytes_of(empty)}});
  EXPECT_FALSE(fs::exists(dir_ / "model.safetensors.tmp"));

  SafetensorsFile file = SafetensorsFile::open(path);
  EXPECT_EQ(file.names(),
            (std::vector<std::string>{"brain", "doubles", "empty", "flags", "half", "ids", "scalar", "w"}));
  EXPECT_EQ(file.metadata().at("format"), "pt");
  EXPECT_EQ(file.info("w").shape, (Shape{2, 3}));
  EXPECT_EQ(file.info("w").dtype, "F32");
  EXPECT_EQ(file.info("scalar").shape, Shape{});
  EXPECT_EQ(file.info("empty").nbytes(), 0u);
  EXPECT_EQ(file.read_as_f32("w"), f32);
  EXPECT_EQ(file.read_as_f32("scalar"), scalar);
  EXPECT_TRUE(file.read_as_f32("empty").empty());
  EXPECT_EQ(file.read_as_f32("half"), (std::vector<float>{1.5f, -2.0f, 0.15625f}));
  EXPECT_EQ(file.read_as_f32("brain"), (std::vector<float>{1.5f, -2.0f, 0.15625f}));
  std::vector<float> doubles = file.read_as_f32("doubles");
  EXPECT_FLOAT_EQ(doubles[0], 0.1f);
  EXPECT_FLOAT_EQ(doubles[1], -0.2f);
  EXPECT_TRUE(std::isinf(doubles[2]));
  std::span<const std::byte> ids = file.raw("ids");
  ASSERT_EQ(ids.size(), 24u);
  EXPECT_EQ(std::memcmp(ids.data(), i64.data(), 24), 0);

  // Layout: header padded to 8 bytes, every tensor aligned to its element size.
  std::ifstream in(path, std::ios::binary);
  uint64_t header_len = 0;
  in.read(reinterpret_cast<char*>(&header_len), 8);
  EXPECT_EQ(header_len % 8, 0u);
  for (const std::string& name : file.names()) {
    const auto& info = file.info(name);
    size_t element = std::max<size_t>(1, safetensors_dtype_bits(info.dtype) / 8);
    EXPECT_EQ(info.data_begin % element, 0u) << name;
  }
  EXPECT_EQ(fs::file_size(path), 8 + header_len + 6 * 4 + 3 + 3 * 2 + 3 * 2 + 3 * 8 + 3 * 8 + 4);
}

TEST_F(SafetensorsTest, WriterRejectsBadInput) {
  const std::vector<float> four(4, 1.0f);
  const fs::path path = dir_ / "bad.safetensors";
  EXPECT_THROW(write_safetensors(path, {{"a", "F32", {3}, bytes_of(four)}}), Error);  // 16 bytes for 12
  EXPECT_THROW(write_safetensors(path, {{"a", "F31", {4}, bytes_of(four)}}), Error);
  EXPECT_THROW(write_safetensors(path, {{"a", "F32", {4}, bytes_of(four)}, {"a", "F32", {4}, bytes_of(four)}}),
               Error);
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(dir_ / "bad.safetensors.tmp"));
}

TEST_F(SafetensorsTest, ShardedCheckpointThroughAnIndex) {
  const std::vector<float> a = {1, 2, 3, 4}, b = {5, 6};
  write_safetensors(dir_ / "model-00001-of-00002.safetensors", {{"a", "F32", {2, 2}, bytes_of(a)}});
  write_safetensors(dir_ / "model-00002-of-00002.safetensors", {{"b", "F32", {2}, bytes_of(b)}});
  std::ofstream(dir_ / "model.safetensors.index.json")
      << R"({"metadata": {"total_size": 24}, "weight_map": {"a": "model-00001-of-00002.safetensors",
             "b": "model-00002-of-00002.safetensors"}})";
  SafetensorsCheckpoint checkpoint = SafetensorsCheckpoint::open(dir_);
  EXPECT_TRUE(checkpoint.sharded());
  EXPECT_EQ(checkpoint.names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(checkpoint.read_as_f32("a"), a);
  EXPECT_EQ(checkpoint.read_as_f32("b"), b);
  EXPECT_EQ(checkpoint.file_of("b").path(), dir_ / "model-00002-of-00002.safetensors");
  try {
    checkpoint.info("c");
    FAIL() << "no error for a missing tensor";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("'c'"), std::string::npos) << e.what();
  }

  // An index naming a tensor its shard lacks.
  std::ofstream(dir_ / "model.safetensors.index.json", std::ios::trunc)
      << R"({"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors"}})";
  try {
    SafetensorsCheckpoint::open(dir_);
    FAIL() << "no error for a tensor missing from its shard";
  } catch (const ConfigError& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("model.safetensors.index.json"), std::string::npos) << message;
    EXPECT_NE(message.find("'b'"), std::string::npos) << message;
  }
  // Shards must stay inside the directory.
  std::ofstream(dir_ / "model.safetensors.index.json", std::ios::trunc)
      << R"({"weight_map": {"a": "../elsewhere.safetensors"}})";
  EXPECT_THROW(SafetensorsCheckpoint::open(dir_), ConfigError);
  std::ofstream(dir_ / "model.safetensors.index.json", std::ios::trunc) << R"({"metadata": {}})";
  EXPECT_THROW(SafetensorsCheckpoint::open(dir_), ConfigError);
  EXPECT_THROW(SafetensorsCheckpoint::open(dir_ / "nowhere"), ConfigError);
}

// ---------------------------------------------------------------------------------------------
// Corrupted files: every error names the file

TEST_F(SafetensorsTest, TruncatedHeaderLength) {
  fs::path path = dir_ / "short.safetensors";
  std::ofstream(path, std::ios::binary) << "abcde";
  std::string message = open_error(path);
  EXPECT_NE(message.find(path.string()), std::string::npos) << message;
  EXPECT_NE(message.find("truncated"), std::string::npos) << message;
}

TEST_F(SafetensorsTest, HeaderLengthLargerThanFile) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  fs::path path = write_raw("long.safetensors", header, std::string(4, '\0'), header.size() + 100);
  std::string message = open_error(path);
  EXPECT_NE(message.find(path.string()), std::string::npos) << message;
  EXPECT_NE(message.find("header length"), std::string::npos) << message;
  // A header cut short inside the file (data missing) is caught by the offsets check.
  path = write_raw("cut.safetensors", header, std::string(2, '\0'));
  message = open_error(path);
  EXPECT_NE(message.find(path.string()), std::string::npos) << message;
  EXPECT_NE(message.find("out of bounds"), std::string::npos) << message;
  // Absurd lengths stop at the 100 MB limit.
  path = write_raw("huge.safetensors", header, "", int64_t(1) << 40);
  EXPECT_NE(open_error(path).find("limit"), std::string::npos);
}

TEST_F(SafetensorsTest, OffsetsOutOfBounds) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
  fs::path path = write_raw("oob.safetensors", header, std::string(8, '\0'));
  std::string message = open_error(path);
  EXPECT_NE(message.find(path.string()), std::string::npos) << message;
  EXPECT_NE(message.find("'a'"), std::string::npos) << message;
  EXPECT_NE(message.find("out of bounds"), std::string::npos) << message;
}

TEST_F(SafetensorsTest, BadJson) {
  fs::path path = write_raw("json.safetensors", R"({"a": {"dtype": "F32", "shape": [1], )", std::string(4, '\0'));
  std::string message = open_error(path);
  EXPECT_NE(message.find(path.string()), std::string::npos) << message;
  EXPECT_NE(message.find("not valid JSON"), std::string::npos) << message;
  path = write_raw("array.safetensors", "[1, 2]", "");
  EXPECT_NE(open_error(path).find(path.string()), std::string::npos);
}

TEST_F(SafetensorsTest, OffsetsInconsistentWithDtypeAndShape) {
  fs::path path = write_raw("size.safetensors", R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})",
                            std::string(8, '\0'));
  std::string message = open_error(path);
  EXPECT_NE(message.find(path.string()), std::string::npos) << message;
  EXPECT_NE(message.find("'a'"), std::string::npos) << message;
  EXPECT_NE(message.find("needs 12"), std::string::npos) << message;
}

TEST_F(SafetensorsTest, OverlapsGapsAndTrailingBytes) {
  fs::path path = write_raw("overlap.safetensors",
                            R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                            R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                            std::string(12, '\0'));
  std::string message = open_error(path);
  EXPECT_NE(message.find(path.string()), std::string::npos) << message;
  EXPECT_NE(message.find("overlaps"), std::string::npos) << message;
  EXPECT_NE(message.find("'b'"), std::string::npos) << message;

  path = write_raw("gap.safetensors", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                   std::string(8, '\0'));
  message = open_error(path);
  EXPECT_NE(message.find("unused bytes"), std::string::npos) << message;

  path = write_raw("trailing.safetensors", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                   std::string(9, '\0'));
  message = open_error(path);
  EXPECT_NE(message.find(path.string()), std::string::npos) << message;
  EXPECT_NE(message.find("trailing"), std::string::npos) << message;
}

TEST_F(SafetensorsTest, HeaderContentErrors) {
  fs::path path = write_raw("dup.safetensors",
                            R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                            R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                            std::string(8, '\0'));
  EXPECT_NE(open_error(path).find("twice"), std::string::npos) << open_error(path);

  path = write_raw("dtype.safetensors", R"({"a":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})",
                   std::string(4, '\0'));
  std::string message = open_error(path);
  EXPECT_NE(message.find("'F33'"), std::string::npos) << message;
  EXPECT_NE(message.find("BF16"), std::string::npos) << message;  // lists the allowed

  path = write_raw("neg.safetensors", R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})",
                   std::string(4, '\0'));
  EXPECT_NE(open_error(path).find("'a'"), std::string::npos);

  path = write_raw("meta.safetensors", R"({"__metadata__":{"format":1}})", "");
  EXPECT_NE(open_error(path).find("__metadata__"), std::string::npos);

  path = write_raw("brace.safetensors", R"(  {"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                   std::string(4, '\0'));
  EXPECT_NE(open_error(path).find("'{'"), std::string::npos);

  // Trailing spaces after the JSON object are allowed (the writer pads with them).
  path = write_raw("padded.safetensors", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}     )",
                   std::string(4, '\0'));
  EXPECT_EQ(open_error(path), "");
  EXPECT_NE(open_error(dir_ / "missing.safetensors").find("missing.safetensors"), std::string::npos);
}

TEST_F(SafetensorsTest, LookupAndConversionErrorsNameFileAndTensor) {
  const std::vector<int64_t> ids = {1, 2};
  const fs::path path = dir_ / "ids.safetensors";
  write_safetensors(path, {{"ids", "I64", {2}, bytes_of(ids)}});
  SafetensorsFile file = SafetensorsFile::open(path);
  for (auto call : {+[](const SafetensorsFile& f) { f.read_as_f32("ids"); },
                    +[](const SafetensorsFile& f) { f.info("nothing"); }}) {
    try {
      call(file);
      FAIL() << "expected an error";
    } catch (const ConfigError& e) {
      std::string message = e.what();
      EXPECT_NE(message.find(path.string()), std::string::npos) << message;
      EXPECT_TRUE(message.find("'ids'") != std::string::npos || message.find("'nothing'") != std::string::npos)
          << message;
    }
  }
}

}  // namespace
}  // namespace tessera::ckpt
