#include "tessera/generate/t5_generator.h"

#include <algorithm>
#include <cmath>

#include "tessera/core/error.h"
#include "tessera/ops/elementwise.h"
#include "tessera/tensor_parallel/tp_mappings.h"

namespace tessera::generate {

void validate_t5(const GenerationRequest& request, int64_t vocab_size, const std::string& where) {
  if (request.prompts.empty()) TESSERA_CONFIG_FAIL(where, ": no prompts");
  if (request.max_new_tokens < 1) TESSERA_CONFIG_FAIL(where, ": max_new_tokens must be >= 1");
  if (request.num_beams != 1)
    TESSERA_CONFIG_FAIL(where, ": beam search is not supported for model.architecture = t5 (greedy only)");
  if (request.sampling.top_k != 1)
    TESSERA_CONFIG_FAIL(where, ": sampling (--temperature/--top-k/--top-p) is not supported for ",
                        "model.architecture = t5 (greedy only)");
  if (request.prompt_logprobs)
    TESSERA_CONFIG_FAIL(where, ": prompt log-probabilities are not supported for model.architecture = t5");
  for (size_t i = 0; i < request.prompts.size(); ++i) {
    if (request.prompts[i].empty()) TESSERA_CONFIG_FAIL(where, ": prompt ", i, " is empty");
    for (int32_t id : request.prompts[i])
      if (id < 0 || id >= vocab_size)
        TESSERA_CONFIG_FAIL(where, ": prompt ", i, " has token id ", id, " outside the vocabulary [0, ", vocab_size, ")");
  }
}

std::vector<GenerationResult> t5_greedy(models::T5Model& model, const GenerationRequest& request,
                                        int32_t decoder_start_token) {
  const int64_t b = static_cast<int64_t>(request.prompts.size());
  int64_t s = 0;
  for (const auto& p : request.prompts) s = std::max<int64_t>(s, static_cast<int64_t>(p.size()));
  std::vector<int32_t> ids(static_cast<size_t>(b * s), 0);
  std::vector<uint8_t> padding(static_cast<size_t>(b * s), 0);
  for (int64_t i = 0; i < b; ++i)
    for (size_t t = 0; t < request.prompts[static_cast<size_t>(i)].size(); ++t) {
      ids[static_cast<size_t>(i * s) + t] = request.prompts[static_cast<size_t>(i)][t];
      padding[static_cast<size_t>(i * s) + t] = 1;
    }
  std::vector<GenerationResult> results(static_cast<size_t>(b));
  std::vector<bool> done(static_cast<size_t>(b), false);
  for (auto& r : results) {
    r.output_ids = {decoder_start_token};
    r.prompt_length = 1;
  }
  const Device device = model.parameters().device();
  Arena encoder_arena(size_t(64) << 20, device), step_arena(size_t(64) << 20, device);
  // The encoder once: the decoder input of the first step is just the start token.
  std::vector<int32_t> decoder(static_cast<size_t>(b), decoder_start_token);
  models::MicroBatch batch;
  batch.tokens = Tensor(ids.data(), DType::i32, {b, s});
  batch.padding_mask = Tensor(padding.data(), DType::u8, {b, s});
  batch.decoder_tokens = Tensor(decoder.data(), DType::i32, {b, 1});
  models::T5Activations acts;
  models::T5Inputs first = model.prepare(encoder_arena, batch);
  model.encode(encoder_arena, first, nn::DropoutContext{}, acts);
  const int64_t vocab = model.vocab_size(), padded = model.padded_vocab_size();
  std::vector<float> last(static_cast<size_t>(b * padded));
  for (int64_t step = 0; step < request.max_new_tokens; ++step) {
    const int64_t t = step + 1;  // decoder tokens so far
    std::vector<int32_t> prefix(static_cast<size_t>(b * t));
    for (int64_t i = 0; i < b; ++i)
      for (int64_t j = 0; j < t; ++j) {
        const auto& out = results[static_cast<size_t>(i)].output_ids;
        prefix[static_cast<size_t>(i * t + j)] = j < static_cast<int64_t>(out.size()) ? out[static_cast<size_t>(j)] : 0;
      }
    batch.decoder_tokens = Tensor(prefix.data(), DType::i32, {b, t});
    models::T5Inputs in = model.prepare(step_arena, batch);
    Tensor logits = model.decode(step_arena, in, nn::DropoutContext{}, acts);  // [t*b, V/tp]
    TESSERA_CHECK(logits.dim(1) == padded, "T5 generation runs on one rank (tensor_model_parallel_size 1)");
    ops::copy(logits.rows((t - 1) * b, t * b), Tensor(last.data(), DType::f32, {b, padded}, Device::cpu()));
    for (int64_t i = 0; i < b; ++i) {
      if (done[static_cast<size_t>(i)]) continue;
      const float* row = last.data() + i * padded;
      const int64_t best = std::max_element(row, row + vocab) - row;
      double sum = 0;
      for (int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(row[v] - row[best]));
      auto& r = results[static_cast<size_t>(i)];
      r.output_ids.push_back(static_cast<int32_t>(best));
      r.logprobs.push_back(static_cast<float>(-std::log(sum)));
      if (request.stop_token >= 0 && best == request.stop_token) done[static_cast<size_t>(i)] = true;
    }
    step_arena.reset();
    if (std::all_of(done.begin(), done.end(), [](bool d) { return d; })) break;
  }
  return results;
}

}  // namespace tessera::generate
