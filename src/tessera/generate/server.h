// tessera-generate --serve: an HTTP/1.1 server compatible with Megatron's text-generation server
// (PUT /api, http_api.h), on world rank 0 while the other ranks follow its broadcasts
// (Generator::follow). Boost.Beast over Boost.Asio, synchronous: one connection and one request at a
// time, in arrival order (later clients wait in the listen backlog), bounded header and body sizes
// and a read timeout so a slow or broken client cannot hold the server. Binds to 127.0.0.1 unless
// told otherwise.
#pragma once
#include <string>

#include "tessera/generate/generator.h"
#include "tessera/generate/http_api.h"

namespace tessera::generate {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 5000;
  size_t max_body_bytes = size_t(1) << 20;
  int read_timeout_seconds = 30;
  ApiLimits limits;
};

// Serves until the process is stopped (ConfigError when the address cannot be bound).
void serve(const ServerOptions& options, Generator& generator, const data::Tokenizer* tokenizer, int64_t vocab_size,
           int64_t eod);

}  // namespace tessera::generate
