// convert_score CKPT TOKENS B S: the mean lm loss of a Tessera checkpoint (any saved layout,
// loaded at TP=1 x PP=1 in fp32 on the CPU) on a batch of token ids (int32 little-endian [B, S+1]:
// inputs, then the shifted labels), through GPTModel::forward_loss, the forward the trainer's
// evaluation runs. Prints "loss <value>". Used by test/gpu/convert_hf_check.sh to compare with
// Hugging Face's loss of the exported model on the same batch.
#include <cstdio>
#include <fstream>
#include <iostream>

#include "tessera/ckpt/checkpoint_reader.h"
#include "tessera/train/training_checkpoints.h"
#include "tessera/convert/convert_options.h"
#include "tessera/convert/stored_config.h"
#include "tessera/core/buffer.h"
#include "tessera/core/error.h"
#include "tessera/models/gpt.h"
#include "tessera/runtime/main_guard.h"

using namespace tessera;

int score_main(int argc, char** argv) {
  if (argc != 5) TESSERA_CONFIG_FAIL("usage: convert_score CKPT TOKENS.bin B S");
  const auto folder = convert::resolve_checkpoint_folder(argv[1], std::nullopt);
  const int64_t b = std::stoll(argv[3]), s = std::stoll(argv[4]);
  ckpt::CheckpointReader reader(folder);
  const int64_t vocab = convert::stored_vocab_size(reader);
  train::Config config = convert::conversion_config(
      convert::stored_keys(reader.config_toml(), {"model"}, (folder / "common.h5").string()), vocab);
  config.model.hidden_dropout = config.model.attention_dropout = 0.0;
  models::GPTModel model(config.model, vocab, DType::f32, Device::cpu());
  for (const ckpt::TensorShard& shard : ckpt::model_shards(model.parameters())) reader.read_model(shard);

  Buffer tokens(static_cast<size_t>(b * (s + 1)) * sizeof(int32_t)), mask(static_cast<size_t>(b * s) * sizeof(float));
  std::ifstream in(argv[2], std::ios::binary);
  in.read(static_cast<char*>(tokens.data()), static_cast<std::streamsize>(b * (s + 1) * sizeof(int32_t)));
  if (!in) TESSERA_CONFIG_FAIL(argv[2], ": expected ", b * (s + 1), " int32 token ids");
  Tensor mask_t = mask.as_tensor(DType::f32, {b, s});
  std::fill(mask_t.data_as<float>(), mask_t.data_as<float>() + b * s, 1.0f);
  Arena arena(size_t(256) << 20);
  models::LossSum loss = model.forward_loss(arena, tokens.as_tensor(DType::i32, {b, s + 1}), mask_t);
  std::printf("loss %.9g\n", loss.loss_sum.value() / loss.denominator);
  return 0;
}

int main(int argc, char** argv) { return run_main(argc, argv, score_main); }
