#include "tessera/generate/request.h"

#include <nlohmann/json.hpp>

#include "tessera/core/error.h"

namespace tessera::generate {

void validate(const GenerationRequest& r, int64_t vocab_size, int64_t max_length, const std::string& where) {
  const char* w = where.c_str();
  if (r.prompts.empty()) TESSERA_CONFIG_FAIL(w, ": no prompts");
  if (r.max_new_tokens < 1) TESSERA_CONFIG_FAIL(w, ": max_new_tokens must be >= 1, got ", r.max_new_tokens);
  for (size_t i = 0; i < r.prompts.size(); ++i) {
    const auto& p = r.prompts[i];
    if (p.empty()) TESSERA_CONFIG_FAIL(w, ": prompt ", i, " is empty (no tokens)");
    for (int32_t id : p)
      if (id < 0 || id >= vocab_size)
        TESSERA_CONFIG_FAIL(w, ": prompt ", i, " has token id ", id, " outside the vocabulary [0, ", vocab_size, ")");
    if (static_cast<int64_t>(p.size()) + r.max_new_tokens > max_length)
      TESSERA_CONFIG_FAIL(w, ": prompt ", i, " (", p.size(), " tokens) + max_new_tokens (", r.max_new_tokens,
                          ") exceeds the model's ", max_length, " positions");
  }
  validate(r.sampling, w);
  if (r.num_beams < 1) TESSERA_CONFIG_FAIL(w, ": num_beams must be >= 1, got ", r.num_beams);
  if (r.num_beams > 1 && !r.sampling.greedy())
    TESSERA_CONFIG_FAIL(w, ": beam search (num_beams ", r.num_beams, ") does not sample: leave top_k, top_p and "
                        "temperature unset");
  if (!(r.length_penalty > -100.0 && r.length_penalty < 100.0))
    TESSERA_CONFIG_FAIL(w, ": length_penalty must be in (-100, 100), got ", r.length_penalty);
  if (r.stop_token >= vocab_size)
    TESSERA_CONFIG_FAIL(w, ": stop token ", r.stop_token, " is outside the vocabulary [0, ", vocab_size, ")");
}

std::string to_json(const GenerationRequest& r) {
  nlohmann::json j;
  j["prompts"] = r.prompts;
  j["max_new_tokens"] = r.max_new_tokens;
  j["top_k"] = r.sampling.top_k;
  j["top_p"] = r.sampling.top_p;
  j["temperature"] = r.sampling.temperature;
  j["top_p_decay"] = r.sampling.top_p_decay;
  j["top_p_bound"] = r.sampling.top_p_bound;
  j["seed"] = r.sampling.seed;
  j["num_beams"] = r.num_beams;
  j["length_penalty"] = r.length_penalty;
  j["stop_token"] = r.stop_token;
  j["prompt_logprobs"] = r.prompt_logprobs;
  j["use_kv_cache"] = r.use_kv_cache;
  return j.dump();
}

GenerationRequest request_from_json(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text);
  GenerationRequest r;
  r.prompts = j.at("prompts").get<std::vector<std::vector<int32_t>>>();
  r.max_new_tokens = j.at("max_new_tokens").get<int64_t>();
  r.sampling.top_k = j.at("top_k").get<int64_t>();
  r.sampling.top_p = j.at("top_p").get<double>();
  r.sampling.temperature = j.at("temperature").get<double>();
  r.sampling.top_p_decay = j.at("top_p_decay").get<double>();
  r.sampling.top_p_bound = j.at("top_p_bound").get<double>();
  r.sampling.seed = j.at("seed").get<uint64_t>();
  r.num_beams = j.at("num_beams").get<int64_t>();
  r.length_penalty = j.at("length_penalty").get<double>();
  r.stop_token = j.at("stop_token").get<int64_t>();
  r.prompt_logprobs = j.at("prompt_logprobs").get<bool>();
  r.use_kv_cache = j.at("use_kv_cache").get<bool>();
  return r;
}

}  // namespace tessera::generate
