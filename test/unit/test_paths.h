// Where tests find the source tree, the shared fixtures and the built executables: the
// environment (run-tests.sh exports it) or the paths CMake compiled in.
#pragma once
#include <cstdlib>
#include <filesystem>
#include <string>

namespace tessera::test {

inline std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}
inline std::filesystem::path source_dir() { return env_or("TESSERA_SOURCE_DIR", TESSERA_TEST_SOURCE_DIR); }
inline std::filesystem::path shared_dir() { return env_or("TESSERA_SHARED_DIR", TESSERA_TEST_SHARED_DIR); }
inline std::filesystem::path bin_dir() { return env_or("TESSERA_BIN_DIR", TESSERA_TEST_BIN_DIR); }

}  // namespace tessera::test
