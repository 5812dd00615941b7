// The generation server's request body (PUT /api, http_api.h): input = the JSON body, read with a
// small WordPiece tokenizer against a 64-position model. parse_api_request must return a request
// or throw ApiError (answered with HTTP 400); an accepted request must pass validate() and survive
// the JSON round trip rank 0 broadcasts to the other ranks (to_json / request_from_json) unchanged.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "fuzz_util.h"
#include "tessera/data/tokenizer.h"
#include "tessera/generate/http_api.h"
#include "tessera/generate/request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto tokenizer = [] {
    tessera::data::TokenizerOptions options;
    options.type = "BertWordPieceLowerCase";
    options.vocab_file = tessera::fuzz::write_file(
        "wordpiece.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\na\n##s\nhello\nworld\n.\n,\n!\n").string();
    return tessera::data::make_tokenizer(options);
  }();
  tessera::generate::ApiContext context;
  context.tokenizer = tokenizer.get();
  context.vocab_size = tokenizer->vocab_size();
  context.max_length = 64;
  context.eod = tokenizer->eod();
  context.limits.max_prompts = 8;
  context.limits.max_tokens_to_generate = 48;
  context.limits.max_prompt_bytes = 4096;
  const std::string body(reinterpret_cast<const char*>(data), size);
  tessera::generate::GenerationRequest request;
  try {
    request = tessera::generate::parse_api_request(body, context);
  } catch (const tessera::generate::ApiError&) {
    return 0;  // HTTP 400 with the message: what a bad body must get
  }
  // Accepted: the model must be able to run it, and the other ranks must receive the same request.
  tessera::generate::validate(request, context.vocab_size, context.max_length, "fuzz");
  const std::string once = tessera::generate::to_json(request);
  const std::string twice = tessera::generate::to_json(tessera::generate::request_from_json(once));
  if (once != twice) {
    std::fprintf(stderr, "request changed in the JSON round trip:\n%s\n%s\n", once.c_str(), twice.c_str());
    std::abort();
  }
  return 0;
}
