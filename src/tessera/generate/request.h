// One generation request: the prompts (token ids) and how to decode them; the same type for the
// batch CLI and the HTTP server. Rank 0 validates it and broadcasts it (as JSON) to the other ranks.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/generate/sampling.h"

namespace tessera::generate {

struct GenerationRequest {
  std::vector<std::vector<int32_t>> prompts;
  int64_t max_new_tokens = 16;
  SamplingParams sampling;
  int64_t num_beams = 1;       // > 1: beam search (greedy scoring), one prompt at a time
  double length_penalty = 1.0;
  int64_t stop_token = -1;     // < 0: none
  bool prompt_logprobs = false;  // logprobs also for the prompt tokens after the first (Megatron's server)
  bool use_kv_cache = true;      // false: recompute every token each step (the reference)
};

struct GenerationResult {
  std::vector<int32_t> output_ids;  // prompt + generated (up to and with the stop token)
  std::vector<float> logprobs;      // per token: the prompt's after the first (prompt_logprobs), then the generated
  int64_t prompt_length = 0;
};

// ConfigError naming `where` for a request the model cannot run: empty prompts, ids outside
// [0, vocab), prompt + max_new_tokens beyond max_length, bad sampling or beam values.
void validate(const GenerationRequest& request, int64_t vocab_size, int64_t max_length, const std::string& where);

std::string to_json(const GenerationRequest& request);
GenerationRequest request_from_json(const std::string& text);

}  // namespace tessera::generate
