#include "tessera/generate/http_api.h"

#include <nlohmann/json.hpp>
#include <set>

#include "tessera/core/error.h"

namespace tessera::generate {

namespace {
using json = nlohmann::json;

[[noreturn]] void fail(const std::string& message) { throw ApiError(message); }

const json* field(const json& body, const char* key) {
  auto it = body.find(key);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}
int64_t integer(const json& body, const char* key, int64_t fallback, int64_t lo, int64_t hi) {
  const json* v = field(body, key);
  if (!v) return fallback;
  if (!v->is_number_integer()) fail(std::string(key) + " must be an integer");
  // An unsigned number above INT64_MAX would wrap to a negative one (2^64 - 1 to -1: "no stop token").
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    fail(std::string(key) + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + v->dump());
  const int64_t x = v->get<int64_t>();
  if (x < lo || x > hi) fail(std::string(key) + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + std::to_string(x));
  return x;
}
double number(const json& body, const char* key, double fallback, double lo, double hi) {
  const json* v = field(body, key);
  if (!v) return fallback;
  if (!v->is_number()) fail(std::string(key) + " must be a number");
  const double x = v->get<double>();
  if (!(x >= lo && x <= hi)) fail(std::string(key) + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return x;
}
bool boolean(const json& body, const char* key, bool fallback) {
  const json* v = field(body, key);
  if (!v) return fallback;
  if (!v->is_boolean()) fail(std::string(key) + " must be a boolean");
  return v->get<bool>();
}
}  // namespace

GenerationRequest parse_api_request(const std::string& text, const ApiContext& c) {
  const json body = json::parse(text, nullptr, false);
  if (body.is_discarded()) fail("malformed JSON in the request body");
  if (!body.is_object()) fail("the request body must be a JSON object");
  static const std::set<std::string> known = {"prompts", "tokens_to_generate", "logprobs", "temperature", "top_k",
                                              "top_p", "top_p_decay", "top_p_bound", "add_BOS", "random_seed",
                                              "beam_width", "length_penalty", "stop_token", "no_log"};
  for (const auto& item : body.items())
    if (!known.count(item.key())) fail("unknown or unsupported key \"" + item.key() + "\"");
  const json* prompts = field(body, "prompts");
  if (!prompts) fail("prompts is missing");
  if (!prompts->is_array() || prompts->empty()) fail("prompts must be a non-empty list of strings");
  if (static_cast<int64_t>(prompts->size()) > c.limits.max_prompts)
    fail("at most " + std::to_string(c.limits.max_prompts) + " prompts per request, got " + std::to_string(prompts->size()));
  GenerationRequest r;
  r.max_new_tokens = integer(body, "tokens_to_generate", 64, 1, c.limits.max_tokens_to_generate);
  r.prompt_logprobs = boolean(body, "logprobs", false);
  r.sampling.temperature = number(body, "temperature", 1.0, 0.0, 100.0);
  if (r.sampling.temperature <= 0.0) fail("temperature must be > 0");
  r.sampling.top_k = integer(body, "top_k", 0, 0, 1000);
  r.sampling.top_p = number(body, "top_p", 0.0, 0.0, 1.0);
  r.sampling.top_p_decay = number(body, "top_p_decay", 0.0, 0.0, 1.0);
  r.sampling.top_p_bound = number(body, "top_p_bound", 0.0, 0.0, 1.0);
  r.sampling.seed = static_cast<uint64_t>(integer(body, "random_seed", 1234, 0, INT64_MAX));
  const bool add_bos = boolean(body, "add_BOS", false);
  r.num_beams = integer(body, "beam_width", 1, 1, 16);
  r.length_penalty = number(body, "length_penalty", 1.0, -10.0, 10.0);
  r.stop_token = integer(body, "stop_token", c.eod, -1, c.vocab_size - 1);
  if (r.num_beams > 1) {
    if (prompts->size() != 1) fail("beam_width needs exactly one prompt");
    r.sampling.top_k = 1;  // beam search scores greedily
    r.sampling.top_p = 0.0;
  }
  if (add_bos && c.eod < 0) fail("add_BOS needs an end-of-document token, which this model has not");
  if (!c.tokenizer) fail("this server has no tokenizer (set data.tokenizer_type, data.vocab_file, data.merge_file)");
  for (size_t i = 0; i < prompts->size(); ++i) {
    const json& p = (*prompts)[i];
    if (!p.is_string()) fail("prompts[" + std::to_string(i) + "] must be a string");
    const std::string& s = p.get_ref<const std::string&>();
    if (static_cast<int64_t>(s.size()) > c.limits.max_prompt_bytes)
      fail("prompts[" + std::to_string(i) + "] is longer than " + std::to_string(c.limits.max_prompt_bytes) + " bytes");
    std::vector<int32_t> ids;
    if (add_bos) ids.push_back(static_cast<int32_t>(c.eod));
    const auto tokens = c.tokenizer->tokenize(s);
    ids.insert(ids.end(), tokens.begin(), tokens.end());
    if (ids.empty()) fail("prompts[" + std::to_string(i) + "] has no tokens (an empty prompt needs add_BOS)");
    r.prompts.push_back(std::move(ids));
  }
  try {
    validate(r, c.vocab_size, c.max_length, "request");
  } catch (const ConfigError& e) {
    fail(e.what());
  }
  return r;
}

std::string api_reply(const GenerationRequest& request, const std::vector<GenerationResult>& results,
                      const data::Tokenizer& tokenizer, bool logprobs) {
  json text = json::array(), segments = json::array(), lps = json::array();
  for (size_t i = 0; i < results.size(); ++i) {
    text.push_back(tokenizer.detokenize(results[i].output_ids));
    json pieces = json::array();
    for (int32_t id : results[i].output_ids) pieces.push_back(tokenizer.detokenize(std::span<const int32_t>(&id, 1)));
    segments.push_back(std::move(pieces));
    lps.push_back(results[i].logprobs);
  }
  (void)request;
  json reply = {{"text", text}, {"segments", segments}, {"logprobs", logprobs ? lps : json(nullptr)}};
  return reply.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace tessera::generate
