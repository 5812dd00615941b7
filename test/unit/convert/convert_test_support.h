// Shared helpers of the converter tests: the GPT-2 fixture and the other families' HF fixture
// folders (a missing fixture fails under CI or TESSERA_SHARED_DIR, else skips), i64 ids as i32, scratch folders, bitwise comparison of HF checkpoints, and
// writing damaged copies of the fixture.
#pragma once
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "test_paths.h"
#include "tessera/ckpt/safetensors.h"

namespace tessera::test {

namespace fs = std::filesystem;

inline bool fixtures_required() {
  const char* shared = std::getenv("TESSERA_SHARED_DIR");
  const char* ci = std::getenv("CI");
  return (shared && *shared) || (ci && *ci);
}

// The HF GPT-2 fixture folder, or "" after GTEST_SKIP / ADD_FAILURE.
inline fs::path gpt2_fixture() {
  fs::path dir = shared_dir() / "fixtures/hf/gpt2/hf";
  if (fs::exists(dir / "model.safetensors")) return dir;
  if (fixtures_required()) ADD_FAILURE() << "HF fixture missing: " << dir << " (TESSERA_SHARED_DIR or CI is set)";
  return {};
}

// The folder `which` (hf, hf_sharded, ...) of the HF fixture family folder `family` below
// ../shared/fixtures/hf (megatron-bert, t5, llama), or "" after ADD_FAILURE when fixtures are required.
inline fs::path shared_hf_fixture(const std::string& family, const std::string& which) {
  const fs::path dir = shared_dir() / "fixtures/hf" / family / which;
  if (fs::exists(dir / "config.json")) return dir;
  if (fixtures_required()) ADD_FAILURE() << "HF " << family << " fixture missing: " << dir;
  return {};
}

// An i64 tensor of a fixture's expected.safetensors (token ids, masks) as i32.
inline std::vector<int32_t> i64_as_i32(const ckpt::SafetensorsFile& file, const std::string& name) {
  const auto bytes = file.raw(name);
  std::vector<int64_t> wide(bytes.size() / 8);
  std::memcpy(wide.data(), bytes.data(), wide.size() * 8);
  return std::vector<int32_t>(wide.begin(), wide.end());
}

// The fixture's shape (public: 2 layers, hidden 32, 4 heads) and the TP x PP it allows, as close
// to TP=2 x PP=2 as its heads and layers divide.
struct FixtureShape {
  int64_t layers = 0, hidden = 0, heads = 0, vocab = 0;
  int64_t tp = 1, pp = 1;
  int64_t hf_tensors() const { return 4 + 12 * layers; }
};
inline FixtureShape fixture_shape(const fs::path& dir) {
  std::ifstream in(dir / "config.json");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto field = [&](const std::string& key) {
    auto at = text.find("\"" + key + "\"");
    EXPECT_NE(at, std::string::npos) << key;
    return at == std::string::npos ? int64_t{0} : std::stoll(text.substr(text.find(':', at) + 1));
  };
  FixtureShape s;
  s.layers = field("n_layer");
  s.hidden = field("n_embd");
  s.heads = field("n_head");
  s.vocab = field("vocab_size");
  s.tp = s.heads % 2 == 0 ? 2 : 1;
  s.pp = s.layers % 2 == 0 ? 2 : s.layers % 3 == 0 ? 3 : 1;
  return s;
}

struct ScratchDir {
  fs::path path;
  ScratchDir() {
    std::random_device rd;
    path = fs::temp_directory_path() / ("tessera-convert-test-" + std::to_string(rd()) + std::to_string(rd()));
    fs::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  fs::path operator/(const std::string& name) const { return path / name; }
};

// Every tensor of `actual` equals `expected`'s byte for byte (same names, dtypes, shapes).
inline void expect_same_tensors(const fs::path& expected_dir, const fs::path& actual_dir) {
  auto expected = ckpt::SafetensorsCheckpoint::open(expected_dir);
  auto actual = ckpt::SafetensorsCheckpoint::open(actual_dir);
  EXPECT_EQ(expected.names(), actual.names());
  for (const std::string& name : expected.names()) {
    if (!actual.contains(name)) continue;
    EXPECT_EQ(expected.info(name).dtype, actual.info(name).dtype) << name;
    EXPECT_EQ(expected.info(name).shape, actual.info(name).shape) << name;
    auto a = expected.raw(name), b = actual.raw(name);
    ASSERT_EQ(a.size(), b.size()) << name;
    EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin())) << name << " differs";
  }
}

// A copy of the fixture's config.json (optionally edited) with the given tensors.
inline void write_hf_dir(const fs::path& dir, const fs::path& fixture,
                         const std::vector<ckpt::SafetensorsTensorData>& tensors, const std::string& config_text = "") {
  fs::create_directories(dir);
  if (config_text.empty()) fs::copy_file(fixture / "config.json", dir / "config.json");
  else std::ofstream(dir / "config.json") << config_text;
  ckpt::write_safetensors(dir / "model.safetensors", tensors);
}

// The fixture's tensors as write_safetensors input (views of the mapped file, kept alive by `file`).
inline std::vector<ckpt::SafetensorsTensorData> fixture_tensors(const ckpt::SafetensorsFile& file) {
  std::vector<ckpt::SafetensorsTensorData> out;
  for (const std::string& name : file.names())
    out.push_back({name, file.info(name).dtype, file.info(name).shape, file.raw(name)});
  return out;
}

}  // namespace tessera::test
