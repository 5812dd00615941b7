// The shared-fixture rule (shared_fixture.h), end to end: this binary runs its own disabled probe
// test, which requires a file that does not exist, under three environments. CI=true or a set
// TESSERA_SHARED_DIR: the probe fails, naming the file and why it is required; neither: it is
// skipped, naming the file.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

#include "shared_fixture.h"

namespace tessera::test {
namespace {

const char* kMissing = "/nonexistent/tessera-shared/fixtures/missing.safetensors";

TEST(SharedFixture, DISABLED_Probe) {
  TESSERA_REQUIRE_SHARED_FILE(kMissing);
  SUCCEED() << "unreachable while the file is missing";
}

struct Probe {
  int exit_code = -1;
  std::string output;
};

Probe run_probe(const std::string& environment) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string command = "env -u CI -u TESSERA_SHARED_DIR " + environment + " " + self +
                              " --gtest_also_run_disabled_tests --gtest_filter=SharedFixture.DISABLED_Probe 2>&1";
  Probe probe;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return probe;
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) probe.output.append(buffer.data(), n);
  const int status = pclose(pipe);
  probe.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return probe;
}

TEST(SharedFixture, MissingFileFailsInCiAndSkipsOutside) {
  const std::string missing = std::string("missing shared file ") + kMissing;
  for (const char* ci : {"CI=true", "CI=1"}) {
    const Probe probe = run_probe(ci);
    EXPECT_EQ(probe.exit_code, 1) << ci << "\n" << probe.output;
    EXPECT_NE(probe.output.find(missing + " (required: " + ci + ")"), std::string::npos) << probe.output;
    EXPECT_NE(probe.output.find("[  FAILED  ] SharedFixture.DISABLED_Probe"), std::string::npos) << probe.output;
  }
  const Probe pointed = run_probe("TESSERA_SHARED_DIR=/nonexistent/tessera-shared");
  EXPECT_EQ(pointed.exit_code, 1) << pointed.output;
  EXPECT_NE(pointed.output.find(missing + " (required: TESSERA_SHARED_DIR=/nonexistent/tessera-shared is set)"),
            std::string::npos)
      << pointed.output;
  const Probe outside = run_probe("CI=false");
  EXPECT_EQ(outside.exit_code, 0) << outside.output;
  EXPECT_NE(outside.output.find(missing + " (skipped outside CI"), std::string::npos) << outside.output;
  EXPECT_NE(outside.output.find("[  SKIPPED ] SharedFixture.DISABLED_Probe"), std::string::npos) << outside.output;
}

}  // namespace
}  // namespace tessera::test
