// tessera-generate's batch input and output: prompts from --prompt texts or a JSON Lines file
// (rows {"prompt": "text"} or {"prompt_ids": [ids]}), and one output row per prompt
// {"prompt", "text", "output_ids", "logprobs"}.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "tessera/data/tokenizer.h"
#include "tessera/generate/request.h"

namespace tessera::generate {

struct Prompt {
  std::optional<std::string> text;  // as given ({"prompt"} / --prompt), absent for prompt_ids
  std::vector<int32_t> ids;
};

// ConfigError naming the file and line for a row that is not an object with exactly one of
// "prompt" (a string) or "prompt_ids" (an array of integers), or for a text prompt without a tokenizer.
std::vector<Prompt> read_prompts_file(const std::string& path, const data::Tokenizer* tokenizer, bool add_bos,
                                      int64_t bos);
Prompt text_prompt(const std::string& text, const data::Tokenizer* tokenizer, bool add_bos, int64_t bos,
                   const std::string& where);

// One output row (a JSON object on one line). text: the detokenized prompt + generation, or null
// without a tokenizer; "prompt": the text given, else the prompt ids.
std::string output_row(const Prompt& prompt, const GenerationResult& result, const data::Tokenizer* tokenizer);

}  // namespace tessera::generate
