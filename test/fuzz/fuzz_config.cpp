// The TOML config and --set values: input = TOML text, then optionally a line "%%" followed by one
// --set value per line (table.key=value). load_config must accept or throw ConfigError.
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "tessera/train/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> overrides;
  auto split = text.find("\n%%\n");
  if (split != std::string::npos) {
    std::string rest = text.substr(split + 4);
    text.resize(split);
    size_t start = 0;
    while (start <= rest.size()) {
      size_t end = rest.find('\n', start);
      if (end == std::string::npos) end = rest.size();
      if (end > start) overrides.push_back(rest.substr(start, end - start));
      start = end + 1;
    }
  }
  auto path = tessera::fuzz::write_file("config.toml", text);
  tessera::fuzz::expect_clean([&] {
    tessera::train::Config config = tessera::train::load_config(path.string(), overrides);
    (void)config.to_toml();
  });
  return 0;
}
