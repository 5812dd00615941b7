// The trainer's encoder-decoder (T5) micro-batches: load() reads a step's samples from a seq2seq
// source (SampleSource::seq2seq(), e.g. T5Dataset or MockT5Dataset) in Megatron's sampler order
// (as the GPT and BERT steps: DP rank r reads the r-th micro_batch_size slice of each chunk of
// micro_batch_size x dp samples) and micro_batch(m) views micro-batch m as the MicroBatch fields
// T5 reads (stage_model.h): tokens, padding_mask [b, s]; decoder_tokens, labels, loss_mask,
// decoder_padding_mask [b, sd].
#pragma once
#include <cstdint>
#include <vector>

#include "tessera/data/sample_source.h"
#include "tessera/models/stage_model.h"
#include "tessera/models/token_loss.h"

namespace tessera::train {

class Seq2SeqBatches {
 public:
  // Throws ConfigError when the source's lengths differ from the model's (model.seq_length,
  // model.decoder_seq_length).
  void load(const data::SampleSource& source, int64_t step_start, int64_t num_micro_batches, int64_t micro_batch_size,
            int64_t seq_length, int64_t decoder_seq_length, int64_t dp_size, int64_t dp_rank);
  models::MicroBatch micro_batch(int64_t m);
  // Micro-batch m's loss inputs for the loss's denominator: seq = decoder length, loss_mask [b, sd]
  // (tokens empty: the decoder's labels are their own field).
  models::LossInputs loss_inputs(int64_t m) const;

 private:
  int64_t b_ = 0, s_ = 0, sd_ = 0;
  std::vector<int32_t> tokens_, decoder_tokens_, labels_;
  std::vector<float> loss_mask_;
  std::vector<uint8_t> padding_, decoder_padding_;
};

}  // namespace tessera::train
