// The one rule for tests that read the shared reference folder (TESSERA_SHARED_DIR: fixtures, test
// vectors, corpus, tools): a missing file fails the test in CI (CI=true, as .ci/run sets it) or when
// TESSERA_SHARED_DIR is set (the caller said where the files are); otherwise (a developer's checkout
// without ../shared) the test is skipped, and the skip message names the missing file.
//   TESSERA_REQUIRE_SHARED_FILE(path);   // in a TEST body or SetUp(): fails or skips when path is absent
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace tessera::test {

// Why a missing shared file is a failure here, or "" when it is only a skip.
inline std::string shared_files_required_because() {
  const char* ci = std::getenv("CI");
  if (ci != nullptr && (std::string(ci) == "true" || std::string(ci) == "1")) return "CI=" + std::string(ci);
  const char* shared = std::getenv("TESSERA_SHARED_DIR");
  if (shared != nullptr && *shared != '\0') return "TESSERA_SHARED_DIR=" + std::string(shared) + " is set";
  return "";
}

}  // namespace tessera::test

#define TESSERA_REQUIRE_SHARED_FILE(path_expression)                                                       \
  do {                                                                                                     \
    const std::filesystem::path tessera_shared_file_ = (path_expression);                                  \
    if (!std::filesystem::exists(tessera_shared_file_)) {                                                  \
      const std::string tessera_required_ = ::tessera::test::shared_files_required_because();              \
      if (!tessera_required_.empty())                                                                      \
        GTEST_FAIL() << "missing shared file " << tessera_shared_file_.string() << " (required: "          \
                     << tessera_required_ << ")";                                                          \
      GTEST_SKIP() << "missing shared file " << tessera_shared_file_.string()                              \
                   << " (skipped outside CI; set CI=true or TESSERA_SHARED_DIR to make it a failure)";    \
    }                                                                                                      \
  } while (0)
