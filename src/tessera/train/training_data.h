// The samples a run trains and evaluates on: the mock dataset (data.mock_data) or the GPT datasets
// built from data.data_path with the configured tokenizer's vocabulary.
#pragma once
#include <memory>

#include "tessera/data/sample_source.h"
#include "tessera/train/config.h"

namespace tessera::train {

struct TrainingData {
  std::shared_ptr<const data::SampleSource> train;
  std::shared_ptr<const data::SampleSource> valid;  // null when the split has no validation part
  std::shared_ptr<const data::SampleSource> test;   // null when the split has no test part
  int64_t vocab_size = 0;                           // before padding
  int32_t eod = -1;                                 // the end-of-document id (mock data: vocab_size - 1)
  std::string description;                          // for the start-up log
};

TrainingData build_training_data(const Config& config);

}  // namespace tessera::train
