// Custom losses through the trainer (label mpi): the key-token weighted loss (training.loss =
// "keytoken_weighted") of the first step equals the Accelerate guide's formula computed here
// independently on one rank (per-sample masked mean of the per-token cross entropy, from logits of
// a plain forward, times 1 + alpha x the sample's key tokens, averaged over the global batch), and
// the lm loss equals the token-weighted mean of the per-token losses, also with Megatron's
// data.eod_mask_loss and data.reset_position_ids (masks and positions recomputed here from the
// end-of-document tokens) and data.reset_attention_mask (each document's per-token losses from a
// forward of that document alone, which sees nothing of the others); on any layout.
// Modes: reference REF key=value... (one rank: writes the reference values)
//        compare REF key=value...   (any layout: one training step with each loss, checked against REF)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "tessera/models/gpt.h"
#include "tessera/runtime/main_guard.h"
#include "tessera/runtime/runtime.h"
#include "tessera/train/trainer.h"

namespace tessera {
namespace {

const std::vector<int32_t> kKeytokens = {3, 7, 11};
constexpr double kAlpha = 0.5;

// A small GPT on mock data without dropout (the reference forward runs without it).
// variant: "lm", "keytoken_weighted", "lm_eod" (lm with eod_mask_loss and reset_position_ids),
// "lm_docs" (lm with eod_mask_loss, reset_position_ids and reset_attention_mask) or "lm_attention"
// (lm with reset_attention_mask only).
std::vector<std::string> overrides_with(char** first, char** last, const std::string& variant) {
  const std::string loss = variant.rfind("lm", 0) == 0 ? "lm" : variant;
  std::vector<std::string> o = {"data.mock_data=true",          "data.vocab_size=20",           "model.num_layers=2",
                                "model.hidden_size=32",         "model.num_attention_heads=4",  "model.seq_length=32",
                                "model.hidden_dropout=0",       "model.attention_dropout=0",    "training.micro_batch_size=2",
                                "training.global_batch_size=8", "training.train_iters=1",       "training.eval_interval=0",
                                "logging.log_interval=1000",    "optimizer.lr_warmup_iters=0", "training.seed=2024",           "training.loss=" + loss};
  if (variant == "lm_eod" || variant == "lm_docs") {
    o.push_back("data.eod_mask_loss=true");
    o.push_back("data.reset_position_ids=true");
  }
  if (variant == "lm_docs" || variant == "lm_attention") o.push_back("data.reset_attention_mask=true");
  if (loss == "keytoken_weighted") {
    o.push_back("loss.keytoken_ids=[3, 7, 11]");
    o.push_back("loss.alpha=" + std::to_string(kAlpha));
  }
  for (char** a = first; a != last; ++a) o.push_back(*a);
  return o;
}

struct Reference {
  double lm = 0, keytoken = 0, lm_eod = 0, lm_docs = 0, lm_attention = 0;
};

// With reset_attention_mask a token attends only to earlier tokens of its own document (the
// end-of-document token ends it): its logits are those of a forward of the document alone, at
// positions restarting from 0 (reset_position_ids) or at the document's own positions in the sample.
// Returns the token-weighted mean loss over the batch (eod inputs skipped when eod_mask_loss,
// else weighted by the sample's loss mask).
double per_document_loss(models::GPTModel& model, const std::vector<int32_t>& tokens, const std::vector<float>& mask,
                         int64_t gbs, int64_t s, int32_t eod, bool eod_mask_loss, bool reset_positions) {
  const int64_t padded = model.padded_vocab_size(), vocab = model.vocab_size();
  Arena arena(size_t(64) << 20, Device::cpu());
  double sum = 0, count = 0;
  int64_t documents = 0;
  for (int64_t b = 0; b < gbs; ++b) {
    const int32_t* sample = tokens.data() + b * (s + 1);
    for (int64_t start = 0; start < s;) {
      int64_t end = start;
      while (end < s && sample[end] != eod) ++end;
      end = std::min(end + 1, s);  // the eod belongs to the document it ends
      const int64_t n = end - start;
      std::vector<int32_t> ids(sample + start, sample + end), positions(static_cast<size_t>(n));
      for (int64_t j = 0; j < n; ++j) positions[static_cast<size_t>(j)] = static_cast<int32_t>(reset_positions ? j : start + j);
      arena.reset();
      Tensor logits = model.forward_logits(arena, Tensor(ids.data(), DType::i32, {1, n}), Tensor(),
                                           Tensor(positions.data(), DType::i32, {1, n}));
      for (int64_t j = 0; j < n; ++j) {
        const float* row = logits.data_as<float>() + j * padded;  // [n, 1, padded]
        double max = row[0];
        for (int64_t v = 1; v < vocab; ++v) max = std::max(max, static_cast<double>(row[v]));
        double total = 0;
        for (int64_t v = 0; v < vocab; ++v) total += std::exp(static_cast<double>(row[v]) - max);
        const double loss = std::log(total) + max - row[sample[start + j + 1]];
        const double m = eod_mask_loss ? (sample[start + j] != eod ? 1.0 : 0.0)
                                       : mask[static_cast<size_t>(b * s + start + j)];
        sum += m * loss;
        count += m;
      }
      ++documents;
      start = end;
    }
  }
  if (documents < gbs + 4)
    throw std::runtime_error("the batch holds fewer than 4 document boundaries: the document-mask check would be weak");
  return sum / count;
}

// The first global batch's per-token losses from a plain single-rank forward, and both formulas.
Reference compute_reference(char** first, char** last) {
  train::Trainer trainer(train::load_config("", overrides_with(first, last, "lm")), Device::cpu());
  const train::TrainingSetup& setup = trainer.setup();
  auto& model = dynamic_cast<models::GPTModel&>(*setup.model);
  const int64_t gbs = setup.config.training.global_batch_size, s = setup.config.model.seq_length;
  std::vector<int32_t> tokens(static_cast<size_t>(gbs * (s + 1))), ids(static_cast<size_t>(gbs * s));
  std::vector<float> mask(static_cast<size_t>(gbs * s));
  for (int64_t i = 0; i < gbs; ++i)
    setup.data.train->sample(i, std::span<int32_t>(tokens.data() + i * (s + 1), static_cast<size_t>(s + 1)),
                             std::span<float>(mask.data() + i * s, static_cast<size_t>(s)));
  for (int64_t i = 0; i < gbs; ++i)
    for (int64_t j = 0; j < s; ++j) ids[static_cast<size_t>(i * s + j)] = tokens[static_cast<size_t>(i * (s + 1) + j)];
  Arena arena(size_t(64) << 20, Device::cpu());
  Tensor logits = model.forward_logits(arena, Tensor(ids.data(), DType::i32, {gbs, s}), Tensor(), Tensor());
  // With eod_mask_loss and reset_position_ids: no loss on an eod input, positions restart after it.
  const int32_t eod = static_cast<int32_t>(model.vocab_size() - 1);  // mock data's end-of-document id
  std::vector<int32_t> positions(ids.size());
  int64_t eods = 0;
  for (int64_t b = 0; b < gbs; ++b)
    for (int64_t j = 0, start = 0; j < s; ++j) {
      positions[static_cast<size_t>(b * s + j)] = static_cast<int32_t>(j - start);
      if (ids[static_cast<size_t>(b * s + j)] == eod) start = j + 1, ++eods;
    }
  if (eods < 4) throw std::runtime_error("the batch holds fewer than 4 end-of-document tokens: the eod check would be weak");
  Arena eod_arena(size_t(64) << 20, Device::cpu());
  Tensor eod_logits = model.forward_logits(eod_arena, Tensor(ids.data(), DType::i32, {gbs, s}), Tensor(),
                                           Tensor(positions.data(), DType::i32, {gbs, s}));
  const int64_t padded = model.padded_vocab_size(), vocab = model.vocab_size();
  auto token_loss = [&](const Tensor& all, int64_t b, int64_t j) {
    const float* row = all.data_as<float>() + (j * gbs + b) * padded;  // [s, b, padded]
    double max = row[0];
    for (int64_t v = 1; v < vocab; ++v) max = std::max(max, static_cast<double>(row[v]));
    double sum = 0;
    for (int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(row[v]) - max);
    return std::log(sum) + max - row[tokens[static_cast<size_t>(b * (s + 1) + j + 1)]];
  };
  Reference ref;
  double token_sum = 0, token_count = 0, sample_sum = 0, eod_sum = 0, eod_count = 0;
  for (int64_t b = 0; b < gbs; ++b) {
    double loss_sum = 0, mask_sum = 0, keys = 0;
    for (int64_t j = 0; j < s; ++j) {
      if (ids[static_cast<size_t>(b * s + j)] != eod) {
        eod_sum += token_loss(eod_logits, b, j);
        eod_count += 1;
      }
      const double loss = token_loss(logits, b, j);
      const double m = mask[static_cast<size_t>(b * s + j)];
      loss_sum += m * loss;
      mask_sum += m;
      for (int32_t k : kKeytokens) keys += ids[static_cast<size_t>(b * s + j)] == k;
    }
    token_sum += loss_sum;
    token_count += mask_sum;
    sample_sum += loss_sum / mask_sum * (1.0 + kAlpha * keys);
  }
  ref.lm = token_sum / token_count;
  ref.keytoken = sample_sum / static_cast<double>(gbs);
  ref.lm_eod = eod_sum / eod_count;
  ref.lm_docs = per_document_loss(model, tokens, mask, gbs, s, eod, true, true);
  ref.lm_attention = per_document_loss(model, tokens, mask, gbs, s, eod, false, false);
  // The document masks must matter on this batch, or the check would not test them.
  if (std::fabs(ref.lm_docs - ref.lm_eod) < 1e-4 * std::fabs(ref.lm_eod) ||
      std::fabs(ref.lm_attention - ref.lm) < 1e-4 * std::fabs(ref.lm))
    throw std::runtime_error("document masks leave the reference loss unchanged: the check would be weak");
  std::printf("reference batch: %lld end-of-document inputs\n", static_cast<long long>(eods));
  return ref;
}

int run(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: custom_loss_test reference|compare REF [key=value...]\n";
    return 2;
  }
  const std::string mode = argv[1], path = argv[2];
  if (mode == "reference") {
    Reference ref = compute_reference(argv + 3, argv + argc);
    std::ofstream(path) << std::hexfloat << ref.lm << " " << ref.keytoken << " " << ref.lm_eod << " " << ref.lm_docs
                        << " " << ref.lm_attention << "\n";
    std::printf("reference: lm %.9g keytoken_weighted %.9g lm with eod masks %.9g, with eod and document masks "
                "%.9g, with document masks only %.9g\n",
                ref.lm, ref.keytoken, ref.lm_eod, ref.lm_docs, ref.lm_attention);
    return std::isfinite(ref.lm) && std::isfinite(ref.keytoken) && ref.keytoken > ref.lm ? 0 : 1;
  }
  Reference ref;
  std::ifstream in(path);
  std::string lm_text, key_text, eod_text, docs_text, attention_text;
  if (!(in >> lm_text >> key_text >> eod_text >> docs_text >> attention_text)) {
    std::cerr << "cannot read the reference " << path << "\n";
    return 1;
  }
  ref.lm = std::strtod(lm_text.c_str(), nullptr);
  ref.keytoken = std::strtod(key_text.c_str(), nullptr);
  ref.lm_eod = std::strtod(eod_text.c_str(), nullptr);
  ref.lm_docs = std::strtod(docs_text.c_str(), nullptr);
  ref.lm_attention = std::strtod(attention_text.c_str(), nullptr);
  int failures = 0;
  for (const std::string loss : {"lm", "keytoken_weighted", "lm_eod", "lm_docs", "lm_attention"}) {
    train::Trainer trainer(train::load_config("", overrides_with(argv + 3, argv + argc, loss)), Device::cpu());
    const double got = trainer.train().lm_loss.at(0);
    const double want = loss == "lm"          ? ref.lm
                        : loss == "lm_eod"    ? ref.lm_eod
                        : loss == "lm_docs"   ? ref.lm_docs
                        : loss == "lm_attention" ? ref.lm_attention
                                              : ref.keytoken;
    const double rel = std::fabs(got - want) / std::fabs(want);
    const bool ok = rel <= 1e-5;
    if (Runtime::get().world_rank() == 0)
      std::printf("%s loss of step 1: %.9g, reference %.9g, relative difference %.2e %s\n", loss.c_str(), got, want,
                  rel, ok ? "ok" : "FAILED (> 1e-5)");
    failures += !ok;
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) { return tessera::run_main(argc, argv, tessera::run); }
