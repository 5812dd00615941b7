// Where the tokenizer tests find their files: the vocabularies in the repository's
// share/tokenizers (TESSERA_SOURCE_DIR) and the test vectors / corpus in TESSERA_SHARED_DIR.
#pragma once
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "test_paths.h"

namespace tessera::data::test {

inline std::filesystem::path source_dir() {
  if (const char* dir = std::getenv("TESSERA_SOURCE_DIR")) return dir;  // set by ctest
#ifdef TESSERA_TEST_SOURCE_DIR
  return TESSERA_TEST_SOURCE_DIR;
#else
  // A direct run of the binary: the checkout this test file lives in (test/unit/tokenizers/..).
  return std::filesystem::path(__FILE__).parent_path().parent_path().parent_path().parent_path();
#endif
}

inline std::filesystem::path shared_dir() { return ::tessera::test::shared_dir(); }  // test_paths.h

inline std::filesystem::path gpt2_dir() { return source_dir() / "share" / "tokenizers" / "gpt2"; }
inline std::filesystem::path bert_dir() { return source_dir() / "share" / "tokenizers" / "bert-base-uncased"; }
inline std::filesystem::path vectors_dir() { return shared_dir() / "data" / "tokenizers"; }

inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream content;
  content << in.rdbuf();
  return content.str();
}

inline std::string hex_to_bytes(const std::string& hex) {
  std::string bytes;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    bytes.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return bytes;
}

}  // namespace tessera::data::test
