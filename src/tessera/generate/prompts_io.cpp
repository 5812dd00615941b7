#include "tessera/generate/prompts_io.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "tessera/core/error.h"

namespace tessera::generate {

Prompt text_prompt(const std::string& text, const data::Tokenizer* tokenizer, bool add_bos, int64_t bos,
                   const std::string& where) {
  if (!tokenizer)
    TESSERA_CONFIG_FAIL(where, ": a text prompt needs a tokenizer (set data.tokenizer_type, data.vocab_file and "
                        "data.merge_file, or give prompt_ids)");
  Prompt p;
  p.text = text;
  if (add_bos) p.ids.push_back(static_cast<int32_t>(bos));
  const auto ids = tokenizer->tokenize(text);
  p.ids.insert(p.ids.end(), ids.begin(), ids.end());
  return p;
}

std::vector<Prompt> read_prompts_file(const std::string& path, const data::Tokenizer* tokenizer, bool add_bos,
                                      int64_t bos) {
  std::ifstream in(path);
  if (!in) TESSERA_CONFIG_FAIL("--prompts-file ", path, ": cannot open");
  std::vector<Prompt> prompts;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(number);
    const auto row = nlohmann::json::parse(line, nullptr, false);
    if (row.is_discarded() || !row.is_object())
      TESSERA_CONFIG_FAIL(where, ": not a JSON object (expected {\"prompt\": \"...\"} or {\"prompt_ids\": [...]})");
    const bool has_text = row.contains("prompt"), has_ids = row.contains("prompt_ids");
    if (has_text == has_ids) TESSERA_CONFIG_FAIL(where, ": a row needs exactly one of \"prompt\" and \"prompt_ids\"");
    if (has_text) {
      if (!row["prompt"].is_string()) TESSERA_CONFIG_FAIL(where, ": \"prompt\" must be a string");
      prompts.push_back(text_prompt(row["prompt"].get<std::string>(), tokenizer, add_bos, bos, where));
      continue;
    }
    const auto& ids = row["prompt_ids"];
    if (!ids.is_array()) TESSERA_CONFIG_FAIL(where, ": \"prompt_ids\" must be an array of integers");
    Prompt p;
    if (add_bos) p.ids.push_back(static_cast<int32_t>(bos));
    for (const auto& id : ids) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
        TESSERA_CONFIG_FAIL(where, ": \"prompt_ids\" must hold non-negative integers, got ", id.dump());
      p.ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
    prompts.push_back(std::move(p));
  }
  if (prompts.empty()) TESSERA_CONFIG_FAIL("--prompts-file ", path, ": no prompts");
  return prompts;
}

std::string output_row(const Prompt& prompt, const GenerationResult& result, const data::Tokenizer* tokenizer) {
  nlohmann::json row;
  if (prompt.text) row["prompt"] = *prompt.text;
  else row["prompt"] = prompt.ids;
  if (tokenizer) row["text"] = tokenizer->detokenize(result.output_ids);
  else row["text"] = nullptr;
  row["output_ids"] = result.output_ids;
  row["logprobs"] = result.logprobs;
  return row.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace tessera::generate
