#include "tessera/train/training_data.h"

#include <sstream>

#include "tessera/core/error.h"
#include "tessera/data/bert_dataset.h"
#include "tessera/data/blended_dataset_builder.h"
#include "tessera/data/gpt_dataset_split.h"
#include "tessera/data/tokenizer_bert_wordpiece.h"
#include "tessera/data/mock_bert_dataset.h"
#include "tessera/data/mock_dataset.h"
#include "tessera/data/mock_t5_dataset.h"
#include "tessera/data/t5_dataset.h"
#include "tessera/data/tokenizer_sentencepiece.h"
#include "tessera/data/tokenizer.h"

namespace tessera::train {

namespace {

std::unique_ptr<data::Tokenizer> build_tokenizer(const DataConfig& d) {
  data::TokenizerOptions options;
  options.type = d.tokenizer_type;
  options.vocab_file = d.vocab_file;
  options.merge_file = d.merge_file;
  options.vocab_size = d.vocab_size;
  options.vocab_extra_ids = d.vocab_extra_ids;
  options.tokenizer_model = d.tokenizer_model;
  return data::make_tokenizer(options);
}

std::vector<std::string> data_path_strings(const std::vector<DataPathEntry>& entries) {
  std::vector<std::string> items;
  for (const auto& entry : entries) {
    if (auto* prefix = std::get_if<std::string>(&entry)) {
      items.push_back(*prefix);
    } else {
      std::ostringstream weight;
      weight.precision(17);
      weight << std::get<double>(entry);
      items.push_back(weight.str());
    }
  }
  return items;
}

}  // namespace

namespace {
// The train / valid / test sources of a dataset whose documents data.split divides (BERT, T5): each
// split's share of the documents, its requested sample count and the base seed + the split's index;
// ConfigError when the training split gets no documents.
template <typename Dataset, typename DatasetConfig>
void split_documents(const Config& config, const std::shared_ptr<const data::IndexedDataset>& dataset,
                     const DatasetConfig& base, const std::string& path, TrainingData& result) {
  const auto& t = config.training;
  const int64_t eval_interval = t.eval_interval > 0 ? t.eval_interval : t.train_iters;
  const auto counts = data::requested_sample_counts(t.train_iters, t.global_batch_size, eval_interval,
                                                    std::max<int64_t>(t.eval_iters, 1));
  const auto bookends = data::split_bookends(data::parse_split(config.data.split));
  std::shared_ptr<const data::SampleSource>* targets[3] = {&result.train, &result.valid, &result.test};
  for (int split = 0; split < 3; ++split) {
    if (!bookends[static_cast<size_t>(split)]) continue;
    const auto [first, end] = data::split_range(*bookends[static_cast<size_t>(split)], dataset->document_count());
    if (first == end) continue;
    DatasetConfig c = base;
    c.num_samples = counts[static_cast<size_t>(split)];
    c.seed = base.seed + static_cast<uint64_t>(split);
    *targets[split] = std::make_shared<Dataset>(dataset, first, end, std::move(c),
                                                path + " (" + data::split_name(static_cast<data::Split>(split)) + " split)");
  }
  if (!result.train) TESSERA_CONFIG_FAIL("data.split = \"", config.data.split, "\" gives the training split no data");
}

// BERT: BertDataset over one sentence-split data_path prefix, its documents split by data.split.
TrainingData build_bert_data(const Config& config) {
  const auto& d = config.data;
  const auto& t = config.training;
  const auto tokenizer = build_tokenizer(d);
  const auto* wordpiece = dynamic_cast<const data::BertWordPieceTokenizer*>(tokenizer.get());
  if (!wordpiece)
    TESSERA_CONFIG_FAIL("data.tokenizer_type = ", d.tokenizer_type, " cannot feed model.architecture = bert (it ",
                        "needs BertWordPieceLowerCase or BertWordPieceCase: [CLS], [SEP], [MASK], [PAD])");
  const std::vector<std::string> paths = data_path_strings(d.data_path);
  if (paths.size() != 1)
    TESSERA_CONFIG_FAIL("data.data_path holds ", paths.size(), " entries; model.architecture = bert reads one ",
                        "sentence-split prefix (blending is not supported for BERT yet)");
  auto dataset = std::make_shared<const data::IndexedDataset>(paths[0]);
  TrainingData result;
  result.vocab_size = tokenizer->vocab_size();
  result.eod = tokenizer->eod();
  data::BertDatasetConfig bert;
  bert.seq_length = config.model.seq_length;
  bert.seed = static_cast<uint64_t>(t.seed);
  bert.cls = wordpiece->cls();
  bert.sep = wordpiece->sep();
  bert.pad = wordpiece->pad();
  bert.mask = wordpiece->mask();
  bert.vocab_size = result.vocab_size;
  bert.mask_prob = d.mask_prob;
  bert.short_seq_prob = d.short_seq_prob;
  bert.continuation.resize(static_cast<size_t>(result.vocab_size));
  for (int64_t id = 0; id < result.vocab_size; ++id)
    bert.continuation[static_cast<size_t>(id)] = wordpiece->id_to_token(static_cast<int32_t>(id)).starts_with("##");
  split_documents<data::BertDataset>(config, dataset, bert, paths[0], result);
  result.description = "BERT samples from " + paths[0] + ", tokenizer " + d.tokenizer_type + " (vocab " +
                       std::to_string(result.vocab_size) + "), split " + d.split;
  return result;
}
// T5: T5Dataset over one sentence-split data_path prefix, its documents split by data.split; the
// tokenizer gives the pad, decoder start and end ids and the data.vocab_extra_ids sentinels.
TrainingData build_t5_data(const Config& config) {
  const auto& d = config.data;
  const auto& t = config.training;
  const auto tokenizer = build_tokenizer(d);
  data::T5DatasetConfig t5;
  if (const auto* wordpiece = dynamic_cast<const data::BertWordPieceTokenizer*>(tokenizer.get())) {
    t5.pad = wordpiece->pad();  // Megatron's T5 with BERT WordPiece: [PAD], [BOS] start, [EOS] end
    t5.bos = wordpiece->bos();
    t5.eos = wordpiece->eos();
    t5.sentinels = wordpiece->additional_special_token_ids();
    t5.continuation.resize(static_cast<size_t>(tokenizer->vocab_size()));
    for (int64_t id = 0; id < tokenizer->vocab_size(); ++id)
      t5.continuation[static_cast<size_t>(id)] = wordpiece->id_to_token(static_cast<int32_t>(id)).starts_with("##");
  } else if (const auto* sp = dynamic_cast<const data::SentencePieceTokenizer*>(tokenizer.get())) {
    t5.pad = sp->pad();  // HF T5: <pad> is also the decoder's start token, </s> the end
    t5.bos = sp->decoder_start();
    t5.eos = sp->eos();
    t5.sentinels = sp->additional_special_token_ids();
    // A piece without the word-boundary mark continues the word before it.
    t5.continuation.resize(static_cast<size_t>(tokenizer->vocab_size()));
    for (int64_t id = 0; id < tokenizer->vocab_size(); ++id)
      t5.continuation[static_cast<size_t>(id)] = sp->continues_word(static_cast<int32_t>(id));
  } else {
    TESSERA_CONFIG_FAIL("data.tokenizer_type = ", d.tokenizer_type, " cannot feed model.architecture = t5 (it needs ",
                        "BertWordPieceLowerCase, BertWordPieceCase or SentencePieceTokenizer)");
  }
  if (t5.sentinels.empty())
    TESSERA_CONFIG_FAIL("model.architecture = t5 needs sentinel tokens: data.vocab_extra_ids = ", d.vocab_extra_ids,
                        " (Megatron's T5 uses 100)");
  const std::vector<std::string> paths = data_path_strings(d.data_path);
  if (paths.size() != 1)
    TESSERA_CONFIG_FAIL("data.data_path holds ", paths.size(), " entries; model.architecture = t5 reads one ",
                        "sentence-split prefix (blending is not supported for T5 yet)");
  auto dataset = std::make_shared<const data::IndexedDataset>(paths[0]);
  TrainingData result;
  result.vocab_size = tokenizer->vocab_size();
  result.eod = tokenizer->eod();
  t5.seq_length = config.model.seq_length;
  t5.decoder_seq_length = config.model.decoder_seq_length;
  t5.seed = static_cast<uint64_t>(t.seed);
  t5.mask_prob = d.mask_prob;
  t5.short_seq_prob = d.short_seq_prob;
  split_documents<data::T5Dataset>(config, dataset, t5, paths[0], result);
  result.description = "T5 samples from " + paths[0] + ", tokenizer " + d.tokenizer_type + " (vocab " +
                       std::to_string(result.vocab_size) + ", " + std::to_string(t5.sentinels.size()) +
                       " sentinels), split " + d.split;
  return result;
}
}  // namespace

TrainingData build_training_data(const Config& config) {
  const auto& d = config.data;
  const auto& t = config.training;
  TrainingData result;
  int64_t train_samples = t.train_iters * t.global_batch_size;
  if (d.mock_data) {
    result.vocab_size = d.vocab_size > 0 ? d.vocab_size : build_tokenizer(d)->vocab_size();
    result.eod = static_cast<int32_t>(result.vocab_size - 1);
    int64_t valid_samples = std::max<int64_t>(1, t.eval_iters * t.global_batch_size);
    uint64_t seed = static_cast<uint64_t>(t.seed);
    if (config.model.architecture == "bert") {  // Megatron's MockBERTDataset: masked-LM samples
      auto mock = [&](int64_t samples, uint64_t s) {
        return std::make_shared<data::MockBertDataset>(config.model.seq_length, result.vocab_size, samples, s, d.mask_prob);
      };
      result.train = mock(train_samples, seed);
      result.valid = mock(valid_samples, seed ^ 0x76616c6964ull);
      result.test = mock(valid_samples, seed ^ 0x74657374ull);
      result.description = "BERT mock data (vocab " + std::to_string(result.vocab_size) + ")";
      return result;
    }
    if (config.model.architecture == "t5") {  // Megatron's MockT5Dataset: span-corrupted samples
      auto mock = [&](int64_t samples, uint64_t s) {
        return std::make_shared<data::MockT5Dataset>(config.model.seq_length, config.model.decoder_seq_length,
                                                     result.vocab_size, samples, s, std::max<int64_t>(d.vocab_extra_ids, 1),
                                                     d.mask_prob);
      };
      result.train = mock(train_samples, seed);
      result.valid = mock(valid_samples, seed ^ 0x76616c6964ull);
      result.test = mock(valid_samples, seed ^ 0x74657374ull);
      result.description = "T5 mock data (vocab " + std::to_string(result.vocab_size) + ")";
      return result;
    }
    result.train = std::make_shared<data::MockDataset>(config.model.seq_length, result.vocab_size, train_samples, seed);
    // The validation samples come from another seed, so evaluation never sees training samples.
    result.valid = std::make_shared<data::MockDataset>(config.model.seq_length, result.vocab_size, valid_samples,
                                                       seed ^ 0x76616c6964ull);
    result.test = std::make_shared<data::MockDataset>(config.model.seq_length, result.vocab_size, valid_samples,
                                                      seed ^ 0x74657374ull);
    result.description = "mock data (vocab " + std::to_string(result.vocab_size) + ")";
    return result;
  }
  if (config.model.architecture == "bert") return build_bert_data(config);
  if (config.model.architecture == "t5") return build_t5_data(config);
  const auto tokenizer = build_tokenizer(d);
  result.vocab_size = tokenizer->vocab_size();
  result.eod = tokenizer->eod();
  data::GPTDatasetConfig gpt;
  gpt.seq_length = config.model.seq_length;
  gpt.seed = static_cast<uint32_t>(t.seed);
  gpt.split = d.split;
  gpt.cache_dir = d.data_cache_path;
  // Without periodic evaluation (eval_interval = 0) there is still one evaluation at the end.
  int64_t eval_interval = t.eval_interval > 0 ? t.eval_interval : t.train_iters;
  auto counts = data::requested_sample_counts(t.train_iters, t.global_batch_size, eval_interval,
                                              std::max<int64_t>(t.eval_iters, 1));
  auto splits = data::build_gpt_datasets(data::parse_data_path(data_path_strings(d.data_path)), gpt, counts);
  if (!splits.train) TESSERA_CONFIG_FAIL("data.split = \"", d.split, "\" gives the training split no data");
  result.train = splits.train;
  result.valid = splits.valid;
  result.test = splits.test;
  result.description = std::to_string(d.data_path.size()) + " data_path entries, tokenizer " + d.tokenizer_type +
                       " (vocab " + std::to_string(result.vocab_size) + "), split " + d.split;
  return result;
}

}  // namespace tessera::train
