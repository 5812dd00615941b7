// Errors carrying file:line. Error is a runtime failure (exit 1); ConfigError is a usage or
// configuration problem (exit 2). TESSERA_CHECK / TESSERA_FAIL are the only ways code raises them.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace tessera {

class Error : public std::runtime_error {
 public:
  Error(const std::string& message, const char* file, int line);
  const std::string& message() const { return message_; }  // without the location
  const std::string& location() const { return location_; }
  virtual int exit_code() const { return 1; }

 private:
  std::string message_;
  std::string location_;
};

// A bad config key, command-line option or input file: the message names the key/file and what is allowed.
class ConfigError : public Error {
 public:
  using Error::Error;
  int exit_code() const override { return 2; }
};

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}
}  // namespace detail

}  // namespace tessera

#define TESSERA_FAIL(...) throw ::tessera::Error(::tessera::detail::concat(__VA_ARGS__), __FILE__, __LINE__)
#define TESSERA_CONFIG_FAIL(...) \
  throw ::tessera::ConfigError(::tessera::detail::concat(__VA_ARGS__), __FILE__, __LINE__)
#define TESSERA_CHECK(cond, ...)                                   \
  do {                                                             \
    if (!(cond)) TESSERA_FAIL("check failed: " #cond ": ", __VA_ARGS__); \
  } while (0)
