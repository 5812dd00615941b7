// Shared pieces of the libFuzzer harnesses: a private scratch folder per process, writing an input
// to a file, and the rule every harness follows: a tessera::Error (the documented way to reject
// bad input, with a message) is fine; any other exception, crash, sanitizer report or hang is a bug.
#pragma once
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "tessera/core/error.h"

namespace tessera::fuzz {

inline const std::filesystem::path& scratch() {
  static const std::filesystem::path dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("tessera_fuzz_" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

inline std::filesystem::path write_file(const std::string& name, std::string_view bytes) {
  auto path = scratch() / name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path;
}

template <typename F>
void expect_clean(F&& body) {
  try {
    body();
  } catch (const tessera::Error&) {
    // Rejected with a message: what bad input must get.
  }
}

}  // namespace tessera::fuzz
