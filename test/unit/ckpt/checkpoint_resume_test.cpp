// Exact resume on one rank: 20 iterations straight equal 10, save, load, 10 more, bitwise (lm_loss
// and grad norm); plus finetune, no_load_optim, keep_last_n and the on-disk layout.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tessera/ckpt/checkpoint_layout.h"
#include "tessera/ckpt/checkpoint_reader.h"
#include "tessera/train/trainer.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& tag) {
  fs::path dir = fs::temp_directory_path() / ("tessera_ckpt_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir;
}

train::Config config(int64_t iters, std::vector<std::string> extra = {}) {
  std::vector<std::string> o = {"data.mock_data=true", "data.vocab_size=50", "model.num_layers=2",
                                "model.hidden_size=32", "model.num_attention_heads=4", "model.seq_length=16",
                                "training.micro_batch_size=2", "training.global_batch_size=4",
                                "training.train_iters=" + std::to_string(iters), "training.eval_interval=5",
                                "training.eval_iters=1", "optimizer.lr_warmup_iters=3",
                                "optimizer.lr_decay_iters=20", "logging.log_interval=100"};
  o.insert(o.end(), extra.begin(), extra.end());
  return train::load_config("", o);
}

void expect_exact_resume(const std::vector<std::string>& precision) {
  fs::path dir = fresh_dir("resume");
  auto straight = train::Trainer(config(20, precision), Device::cpu()).train();
  std::vector<std::string> save = precision;
  save.push_back("checkpoint.save=" + dir.string());
  auto first = train::Trainer(config(10, save), Device::cpu()).train();
  ASSERT_EQ(ckpt::read_tracker(dir)->iteration, 10);
  std::vector<std::string> load = save;
  load.push_back("checkpoint.load=" + dir.string());
  auto second = train::Trainer(config(20, load), Device::cpu()).train();
  ASSERT_EQ(straight.lm_loss.size(), 20u);
  ASSERT_EQ(first.lm_loss.size(), 10u);
  ASSERT_EQ(second.lm_loss.size(), 10u);
  for (size_t i = 0; i < 10; ++i) {
    EXPECT_EQ(first.lm_loss[i], straight.lm_loss[i]) << "iteration " << i + 1;
    EXPECT_EQ(second.lm_loss[i], straight.lm_loss[10 + i]) << "iteration " << i + 11;  // bitwise
    EXPECT_EQ(second.grad_norm[i], straight.grad_norm[10 + i]) << "iteration " << i + 11;
  }
  EXPECT_EQ(second.last_eval_loss, straight.last_eval_loss);
  // Timed: every iteration a run makes but its first (2..20, 2..10, then 12..20 after the resume).
  EXPECT_EQ(straight.timed_iterations, 19);
  EXPECT_EQ(first.timed_iterations, 9);
  EXPECT_EQ(second.timed_iterations, 9);
  EXPECT_EQ(second.first_timed_iteration, 12);
  EXPECT_EQ(second.last_timed_iteration, 20);
  EXPECT_EQ(ckpt::read_tracker(dir)->iteration, 20);  // saved again at the end
  fs::remove_all(dir);
}

TEST(CheckpointResume, Fp32TwentyEqualsTenPlusTenBitwise) { expect_exact_resume({}); }

// bf16 trains through optim::DistributedOptimizer: fp32 main params, moments and the step count resume.
TEST(CheckpointResume, Bf16TwentyEqualsTenPlusTenBitwise) { expect_exact_resume({"training.precision=bf16"}); }

TEST(CheckpointResume, WithoutOptimizerStateTheLossesDiffer) {
  fs::path dir = fresh_dir("nooptim");
  auto straight = train::Trainer(config(14), Device::cpu()).train();
  train::Trainer(config(10, {"checkpoint.save=" + dir.string()}), Device::cpu()).train();
  auto resumed = train::Trainer(config(14, {"checkpoint.load=" + dir.string(), "checkpoint.no_load_optim=true"}),
                                Device::cpu())
                     .train();
  ASSERT_EQ(resumed.lm_loss.size(), 4u);
  EXPECT_EQ(resumed.lm_loss[0], straight.lm_loss[10]);  // same weights and data: the first loss agrees
  EXPECT_NE(resumed.lm_loss[3], straight.lm_loss[13]);  // fresh moments change the updates
  fs::remove_all(dir);
}

TEST(CheckpointResume, FinetuneLoadsWeightsAndRestartsAtIterationOne) {
  fs::path dir = fresh_dir("finetune");
  auto fresh = train::Trainer(config(3), Device::cpu()).train();
  train::Trainer(config(10, {"checkpoint.save=" + dir.string()}), Device::cpu()).train();
  auto tuned =
      train::Trainer(config(3, {"checkpoint.load=" + dir.string(), "checkpoint.finetune=true"}), Device::cpu()).train();
  ASSERT_EQ(tuned.lm_loss.size(), 3u);  // iterations 1..3 again
  EXPECT_NE(tuned.lm_loss[0], fresh.lm_loss[0]);  // trained weights, same first batch
  fs::remove_all(dir);
}

TEST(CheckpointLayout, IntervalKeepLastNAndSelfDescribingFiles) {
  fs::path dir = fresh_dir("layout");
  train::Trainer(config(8, {"checkpoint.save=" + dir.string(), "checkpoint.save_interval=2",
                            "checkpoint.keep_last_n=2"}),
                 Device::cpu())
      .train();
  EXPECT_EQ(ckpt::list_checkpoints(dir), (std::vector<int64_t>{6, 8}));
  EXPECT_EQ(ckpt::read_tracker(dir)->iteration, 8);
  fs::path folder = dir / "iter_0000008";
  EXPECT_TRUE(fs::exists(folder / "mp_rank_00_000.h5"));
  EXPECT_TRUE(fs::exists(folder / "common.h5"));
  for (const auto& entry : fs::directory_iterator(dir))
    EXPECT_EQ(entry.path().filename().string().find(".tmp-"), std::string::npos) << entry.path();
  ckpt::CheckpointReader reader(folder);
  EXPECT_EQ(reader.iteration(), 8);
  EXPECT_EQ(reader.progress().consumed_samples, 32);
  EXPECT_EQ(reader.progress().eval_consumed_samples, 4 * 1);  // one evaluation (iteration 5) of one batch
  EXPECT_EQ(reader.optimizer_scalars().step, 8);
  EXPECT_TRUE(reader.has("param", "embedding.word_embeddings.weight"));
  EXPECT_TRUE(reader.has("exp_avg_sq", "decoder.final_layernorm.weight"));
  EXPECT_NE(reader.config_toml().find("hidden_size = 32"), std::string::npos);
  fs::remove_all(dir);
}

TEST(CheckpointLayout, NamesAndTracker) {
  ckpt::ShardCoordinates c;
  c.tp_rank = 1;
  c.pp_rank = 2;
  EXPECT_EQ(ckpt::iteration_dir_name(100), "iter_0000100");
  EXPECT_EQ(ckpt::model_shard_file_name(c), "mp_rank_01_002.h5");
  c.ep_size = 2;
  c.ep_rank = 1;
  EXPECT_EQ(ckpt::model_shard_file_name(c), "mp_rank_01_002_001.h5");
  fs::path dir = fresh_dir("tracker");
  fs::create_directories(dir);
  EXPECT_FALSE(ckpt::read_tracker(dir).has_value());
  ckpt::write_tracker_atomically(dir, 42);
  EXPECT_EQ(ckpt::read_tracker(dir)->iteration, 42);
  { std::ofstream(dir / ckpt::kTrackerFile) << "release\n"; }
  EXPECT_TRUE(ckpt::read_tracker(dir)->release);
  { std::ofstream(dir / ckpt::kTrackerFile) << "12abc"; }
  EXPECT_THROW(ckpt::read_tracker(dir), Error);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tessera
