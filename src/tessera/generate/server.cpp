#include "tessera/generate/server.h"

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <nlohmann/json.hpp>

#include "tessera/core/error.h"
#include "tessera/core/logging.h"

namespace tessera::generate {

namespace {
namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

http::response<http::string_body> reply(http::status status, const std::string& body, unsigned version) {
  http::response<http::string_body> res{status, version};
  res.set(http::field::server, "tessera-generate");
  res.set(http::field::content_type, "application/json");
  res.keep_alive(false);
  res.body() = body;
  res.prepare_payload();
  return res;
}

std::string message_body(const std::string& message) {
  return nlohmann::json{{"message", message}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// One connection: read one request (bounded, with a deadline), answer it, close.
void handle(tcp::socket socket, const ServerOptions& options, Generator& generator, const ApiContext& api) {
  beast::tcp_stream stream(std::move(socket));
  stream.expires_after(std::chrono::seconds(options.read_timeout_seconds));
  beast::flat_buffer buffer;
  http::request_parser<http::string_body> parser;
  parser.header_limit(16 * 1024);
  parser.body_limit(options.max_body_bytes);
  beast::error_code ec;
  http::read(stream, buffer, parser, ec);
  http::response<http::string_body> res;
  if (ec == http::error::body_limit) {
    res = reply(http::status::payload_too_large,
                message_body("request body larger than " + std::to_string(options.max_body_bytes) + " bytes"), 11);
  } else if (ec == http::error::header_limit) {
    res = reply(http::status::request_header_fields_too_large, message_body("request header too large"), 11);
  } else if (ec) {
    if (ec != http::error::end_of_stream && ec != beast::error::timeout)
      res = reply(http::status::bad_request, message_body("bad HTTP request: " + ec.message()), 11);
    else
      return;  // the client went away or sent nothing in time
  } else {
    const auto& req = parser.get();
    const unsigned version = req.version();
    if (req.target() != "/api") {
      res = reply(http::status::not_found, message_body("not found: use PUT /api"), version);
    } else if (req.method() != http::verb::put && req.method() != http::verb::post) {
      res = reply(http::status::method_not_allowed, message_body("use PUT /api"), version);
    } else {
      GenerationRequest request;
      bool valid = true;
      try {
        request = parse_api_request(req.body(), api);
      } catch (const std::exception& e) {  // ApiError, or anything else the input provoked before any broadcast
        valid = false;
        res = reply(http::status::bad_request, message_body(e.what()), version);
      }
      if (valid) {
        const auto start = std::chrono::steady_clock::now();
        const auto results = generator.run(request);  // a failure here is a bug: it ends the job on every rank
        try {
          res = reply(http::status::ok, api_reply(request, results, *api.tokenizer, request.prompt_logprobs), version);
        } catch (const std::exception& e) {  // every rank is done with this request: answer, keep serving
          res = reply(http::status::internal_server_error, message_body(std::string("reply: ") + e.what()), version);
        }
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        log::info("PUT /api: ", request.prompts.size(), " prompts, ", request.max_new_tokens, " tokens in ", seconds, " s");
      }
    }
  }
  stream.expires_after(std::chrono::seconds(options.read_timeout_seconds));
  http::write(stream, res, ec);  // a client that left early is not the server's problem
  stream.socket().shutdown(tcp::socket::shutdown_send, ec);
}
}  // namespace

void serve(const ServerOptions& options, Generator& generator, const data::Tokenizer* tokenizer, int64_t vocab_size,
           int64_t eod) {
  ApiContext api;
  api.tokenizer = tokenizer;
  api.vocab_size = vocab_size;
  api.max_length = generator.max_length();
  api.eod = eod;
  api.limits = options.limits;
  if (!tokenizer) log::warn("tessera-generate --serve has no tokenizer: every request will be refused (HTTP 400)");
  net::io_context ioc;
  tcp::acceptor acceptor(ioc);
  beast::error_code ec;
  const auto address = net::ip::make_address(options.host, ec);
  if (ec) TESSERA_CONFIG_FAIL("--host ", options.host, ": not an IP address (", ec.message(), ")");
  if (options.port < 0 || options.port > 65535) TESSERA_CONFIG_FAIL("--port ", options.port, ": not in [0, 65535]");
  const tcp::endpoint endpoint(address, static_cast<unsigned short>(options.port));
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) TESSERA_CONFIG_FAIL("--host ", options.host, " --port ", options.port, ": cannot listen (", ec.message(), ")");
  log::info("serving PUT http://", options.host, ":", acceptor.local_endpoint().port(), "/api");
  for (;;) {
    tcp::socket socket(ioc);
    acceptor.accept(socket, ec);
    if (ec) {
      log::warn("accept failed: ", ec.message());
      continue;
    }
    handle(std::move(socket), options, generator, api);
  }
}

}  // namespace tessera::generate
