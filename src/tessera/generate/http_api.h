// The body of Megatron's text-generation server API (PUT /api) and its reply, independent of the
// socket: a strict reading of the JSON request into a GenerationRequest (any problem is an
// ApiError, answered with HTTP 400 and its message), and the JSON reply.
// Request keys: prompts (1..max_prompts strings), tokens_to_generate (int >= 1, default 64),
// logprobs (bool), temperature (0 < t <= 100, default 1), top_k (0..1000, default 0), top_p (0..1),
// top_p_decay (0..1), top_p_bound (0..top_p), add_BOS (bool), random_seed (int >= 0),
// beam_width (int >= 1, one prompt), length_penalty (number), stop_token (int in the vocabulary).
// As in Megatron, top_k = 0 and top_p = 0 sample from the whole distribution; top_k = 1 is greedy.
// Reply: {"text": [prompt + generation, ...], "segments": [[token strings], ...], "logprobs":
// [[the log-probability of every token after the first], ...] or null}.
#pragma once
#include <stdexcept>
#include <string>
#include <vector>

#include "tessera/data/tokenizer.h"
#include "tessera/generate/request.h"

namespace tessera::generate {

struct ApiError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct ApiLimits {
  int64_t max_prompts = 128;
  int64_t max_tokens_to_generate = 1024;
  int64_t max_prompt_bytes = 65536;
};

struct ApiContext {
  const data::Tokenizer* tokenizer = nullptr;  // required for text prompts
  int64_t vocab_size = 0;
  int64_t max_length = 0;  // positions of the model
  int64_t eod = -1;        // add_BOS token and default stop token
  ApiLimits limits;
};

GenerationRequest parse_api_request(const std::string& body, const ApiContext& context);
std::string api_reply(const GenerationRequest& request, const std::vector<GenerationResult>& results,
                      const data::Tokenizer& tokenizer, bool logprobs);

}  // namespace tessera::generate
