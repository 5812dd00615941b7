#include "tessera/core/error.h"

#include <filesystem>

namespace tessera {

static std::string short_location(const char* file, int line) {
  std::string path(file);
  auto pos = path.find("src/tessera/");
  if (pos == std::string::npos) pos = path.find("src/");
  if (pos != std::string::npos) path = path.substr(pos);
  return path + ":" + std::to_string(line);
}

Error::Error(const std::string& message, const char* file, int line)
    : std::runtime_error(message + " [" + short_location(file, line) + "]"),
      message_(message),
      location_(short_location(file, line)) {}

}  // namespace tessera
