// Issue 23's config keys (parallel.distributed_timeout_minutes, checkpoint.async_save) through
// every way a config is made: load_config, tessera-train --help, tessera-config --defaults; and
// the load-time checks of keys that came with later features (checkpoint.pretrained_hf,
// logging.tensorboard_dir), which name the key instead of failing later or on one rank only.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "tessera/core/error.h"
#include "tessera/train/config.h"
#include "test_paths.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

struct CliRun {
  int exit_code;
  std::string output;
};

CliRun run_command(const std::string& command) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  EXPECT_NE(pipe, nullptr);
  std::string output;
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) output.append(buffer.data(), n);
  int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

// The ConfigError message of load_config("", mock data + sets) ("" when it loads).
std::string config_error(std::vector<std::string> sets) {
  sets.insert(sets.begin(), {"data.mock_data=true", "data.vocab_size=100"});
  try {
    train::load_config("", sets);
  } catch (const ConfigError& e) {
    return e.message();
  }
  return "";
}

fs::path temp_path(const std::string& name) {
  return fs::temp_directory_path() / ("tessera_rel_keys_" + std::to_string(::getpid()) + "_" + name);
}

TEST(ReliabilityKeys, LoadedIntoTheConfig) {
  train::Config c = train::load_config("", {"data.mock_data=true", "data.vocab_size=100"});
  EXPECT_EQ(c.parallel.distributed_timeout_minutes, 10.0);  // a stuck collective ends the job after 10 min
  EXPECT_FALSE(std::get<bool>(c.values.at("checkpoint.async_save")));
  c = train::load_config("", {"data.mock_data=true", "data.vocab_size=100", "parallel.distributed_timeout_minutes=0.5",
                              "checkpoint.async_save=true"});
  EXPECT_EQ(c.parallel.distributed_timeout_minutes, 0.5);
  EXPECT_TRUE(std::get<bool>(c.values.at("checkpoint.async_save")));
  EXPECT_NE(c.to_toml().find("distributed_timeout_minutes = 0.5"), std::string::npos) << c.to_toml();
  EXPECT_NE(c.to_toml().find("async_save = true"), std::string::npos) << c.to_toml();
}

TEST(ReliabilityKeys, BadValuesNameTheKey) {
  std::string e = config_error({"parallel.distributed_timeout_minutes=-1"});
  EXPECT_NE(e.find("--set parallel.distributed_timeout_minutes=-1"), std::string::npos) << e;
  EXPECT_NE(e.find("[0, inf)"), std::string::npos) << e;
  e = config_error({"parallel.distributed_timeout_minutes=nan"});
  EXPECT_NE(e.find("parallel.distributed_timeout_minutes = nan must be a finite number"), std::string::npos) << e;
  e = config_error({"checkpoint.async_save=\"yes\""});
  EXPECT_NE(e.find("checkpoint.async_save"), std::string::npos) << e;
}

TEST(ReliabilityKeys, ListedByTesseraTrainHelp) {
  CliRun r = run_command((test::bin_dir() / "tessera-train").string() + " --help");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("distributed_timeout_minutes = "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("async_save = false"), std::string::npos) << r.output;
}

TEST(ReliabilityKeys, WrittenAndCheckedByTesseraConfig) {
  const fs::path out = temp_path("written.toml");
  const std::string config = (test::bin_dir() / "tessera-config").string() + " --defaults --output " + out.string();
  CliRun r = run_command(config + " --set parallel.distributed_timeout_minutes=2.5 --set checkpoint.async_save=true");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  train::Config c = train::load_config(out.string(), {});
  EXPECT_EQ(c.parallel.distributed_timeout_minutes, 2.5);
  EXPECT_TRUE(std::get<bool>(c.values.at("checkpoint.async_save")));
  fs::remove(out);
  r = run_command(config + " --set parallel.distributed_timeout_minutes=-3");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("parallel.distributed_timeout_minutes"), std::string::npos) << r.output;
  fs::remove(out);
}

TEST(ReliabilityKeys, PretrainedHfIsCheckedAtLoad) {
  const fs::path hf = temp_path("hf");
  fs::remove_all(hf);
  std::string e = config_error({"checkpoint.pretrained_hf=\"" + hf.string() + "\"", "checkpoint.save=\"/tmp\""});
  EXPECT_NE(e.find("checkpoint.pretrained_hf"), std::string::npos) << e;
  EXPECT_NE(e.find("is not a folder"), std::string::npos) << e;
  fs::create_directories(hf);
  e = config_error({"checkpoint.pretrained_hf=\"" + hf.string() + "\"", "checkpoint.save=\"/tmp\""});
  EXPECT_NE(e.find("has no config.json"), std::string::npos) << e;
  std::ofstream(hf / "config.json") << "{}";
  e = config_error({"checkpoint.pretrained_hf=\"" + hf.string() + "\""});
  EXPECT_NE(e.find("checkpoint.pretrained_hf"), std::string::npos) << e;
  EXPECT_NE(e.find("needs checkpoint.save"), std::string::npos) << e;
  // finetune may rely on pretrained_hf (it becomes checkpoint.load); without either it is refused.
  EXPECT_EQ(config_error({"checkpoint.pretrained_hf=\"" + hf.string() + "\"", "checkpoint.save=\"/tmp\"",
                          "checkpoint.finetune=true"}),
            "");
  e = config_error({"checkpoint.finetune=true"});
  EXPECT_NE(e.find("checkpoint.finetune"), std::string::npos) << e;
  fs::remove_all(hf);
}

TEST(ReliabilityKeys, TensorboardDirMustBeCreatableAtStart) {
  const fs::path file = temp_path("a_file");
  std::ofstream(file) << "x";
  std::string e = config_error({"logging.tensorboard_dir=\"" + (file / "tb").string() + "\""});
  EXPECT_NE(e.find("logging.tensorboard_dir"), std::string::npos) << e;
  EXPECT_NE(e.find("is not a folder"), std::string::npos) << e;
  e = config_error({"logging.tensorboard_dir=\"" + file.string() + "\""});
  EXPECT_NE(e.find("logging.tensorboard_dir"), std::string::npos) << e;
  fs::remove(file);
  EXPECT_EQ(config_error({"logging.tensorboard_dir=\"" + temp_path("tb/new").string() + "\""}), "");
}

}  // namespace
}  // namespace tessera
