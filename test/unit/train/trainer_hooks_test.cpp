// The Trainer's loop hooks: on_iteration sees every iteration's metrics (the same lm_loss and
// grad_norm the summary holds), on_eval every evaluation, and should_stop ends training after the
// iteration it returns true for.
#include <gtest/gtest.h>

#include "tessera/train/trainer.h"

namespace tessera {
namespace {

train::Config small_config() {
  return train::load_config("", {"data.mock_data=true", "data.vocab_size=50", "model.num_layers=2",
                                 "model.hidden_size=32", "model.num_attention_heads=4", "model.seq_length=16",
                                 "training.micro_batch_size=2", "training.global_batch_size=4",
                                 "training.train_iters=8", "training.eval_interval=4", "training.eval_iters=1",
                                 "optimizer.lr_warmup_iters=2", "logging.log_interval=100"});
}

TEST(TrainerHooks, SeeEveryIterationAndEvaluation) {
  std::vector<int64_t> iterations;
  std::vector<double> losses, norms;
  std::vector<int64_t> evals;
  train::TrainingHooks hooks;
  hooks.on_iteration = [&](const train::IterationMetrics& m) {
    iterations.push_back(m.iteration);
    losses.push_back(m.lm_loss);
    norms.push_back(m.grad_norm);
  };
  hooks.on_eval = [&](int64_t iteration, double) { evals.push_back(iteration); };
  train::Trainer trainer(small_config(), Device::cpu());
  EXPECT_EQ(trainer.setup().num_micro_batches, 2);
  train::TrainingSummary summary = trainer.train(hooks);
  EXPECT_EQ(iterations, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(losses, summary.lm_loss);
  EXPECT_EQ(norms, summary.grad_norm);
  EXPECT_EQ(evals, (std::vector<int64_t>{4, 8}));
}

TEST(TrainerHooks, ShouldStopEndsTrainingAfterThatIteration) {
  train::TrainingHooks hooks;
  hooks.should_stop = [](int64_t iteration) { return iteration == 3; };
  train::TrainingSummary summary = train::Trainer(small_config(), Device::cpu()).train(hooks);
  EXPECT_EQ(summary.lm_loss.size(), 3u);
  train::TrainingSummary full = train::Trainer(small_config(), Device::cpu()).train();
  ASSERT_EQ(full.lm_loss.size(), 8u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(summary.lm_loss[i], full.lm_loss[i]) << "iteration " << i + 1;
}

}  // namespace
}  // namespace tessera
