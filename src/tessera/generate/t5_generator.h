// Greedy generation with T5 (models/t5.h), HF's generate() for an encoder-decoder model: the
// encoder runs once over the (right-padded) prompts, then the decoder runs from the decoder start
// token, one new token per step, each sequence stopping after its stop token. There is no KV
// cache: every step runs the decoder over the whole prefix (the encoder's output is reused).
// Results hold the decoder's sequence (start token, then the generated tokens) as HF's output_ids,
// prompt_length 1 (the start token), and the generated tokens' log-probabilities.
#pragma once
#include <cstdint>
#include <vector>

#include "tessera/generate/request.h"
#include "tessera/models/t5.h"

namespace tessera::generate {

// ConfigError naming `where` for what T5 generation does not run: sampling, beam search, prompt
// log-probabilities, empty prompts or ids outside [0, vocab).
void validate_t5(const GenerationRequest& request, int64_t vocab_size, const std::string& where);

std::vector<GenerationResult> t5_greedy(models::T5Model& model, const GenerationRequest& request,
                                        int32_t decoder_start_token = 0);

}  // namespace tessera::generate
