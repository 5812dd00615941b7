// Two training runs with the same seed give bitwise-identical lm_loss sequences; another seed
// gives a different one (so the comparison can fail).
#include <gtest/gtest.h>

#include "tessera/train/trainer.h"

namespace tessera {
namespace {

train::Config small_config(int64_t seed) {
  return train::load_config("", {"data.mock_data=true", "data.vocab_size=50", "model.num_layers=2",
                                 "model.hidden_size=32", "model.num_attention_heads=4", "model.seq_length=16",
                                 "training.micro_batch_size=2", "training.global_batch_size=4",
                                 "training.train_iters=12", "training.eval_interval=6", "training.eval_iters=1",
                                 "optimizer.lr_warmup_iters=2", "logging.log_interval=100",
                                 "training.seed=" + std::to_string(seed)});
}

TEST(TrainerDeterminism, SameSeedGivesBitwiseIdenticalLosses) {
  auto first = train::Trainer(small_config(1234), Device::cpu()).train();
  auto second = train::Trainer(small_config(1234), Device::cpu()).train();
  auto other = train::Trainer(small_config(99), Device::cpu()).train();
  ASSERT_EQ(first.lm_loss.size(), 12u);
  for (size_t i = 0; i < first.lm_loss.size(); ++i) {
    EXPECT_EQ(first.lm_loss[i], second.lm_loss[i]) << "iteration " << i + 1;  // exact, not near
    EXPECT_EQ(first.grad_norm[i], second.grad_norm[i]) << "iteration " << i + 1;
  }
  EXPECT_EQ(first.last_eval_loss, second.last_eval_loss);
  EXPECT_NE(first.lm_loss, other.lm_loss);
}

TEST(TrainerDeterminism, DropoutIsSeededToo) {
  auto config = small_config(7);
  EXPECT_GT(config.model.hidden_dropout, 0.0);  // defaults keep dropout on
  auto a = train::Trainer(config, Device::cpu()).train();
  auto b = train::Trainer(config, Device::cpu()).train();
  EXPECT_EQ(a.lm_loss, b.lm_loss);
}

}  // namespace
}  // namespace tessera
