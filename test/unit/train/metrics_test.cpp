// The metrics_file rows: strict JSON (no NaN / Infinity tokens) with every non-finite value written
// as null, finite values exactly, nan_iterations, and evaluation rows the same way.
#include "tessera/train/metrics.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tessera::train {
namespace {

namespace fs = std::filesystem;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// Every row of the file, each parsed as strict JSON (nlohmann rejects NaN and Infinity tokens).
std::vector<nlohmann::json> rows_of(const fs::path& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> rows;
  for (std::string line; std::getline(in, line);) {
    nlohmann::json row;
    EXPECT_NO_THROW(row = nlohmann::json::parse(line)) << "not strict JSON: " << line;
    rows.push_back(row);
  }
  return rows;
}

class MetricsFile : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = fs::temp_directory_path() / ("tessera_metrics_" + std::to_string(::getpid()) + ".jsonl");
    fs::remove(path_);
  }
  void TearDown() override { fs::remove(path_); }
  fs::path path_;
};

TEST_F(MetricsFile, NonFiniteValuesAreNullAndFiniteOnesExact) {
  {
    MetricsWriter writer(path_.string());
    ASSERT_TRUE(writer.enabled());
    IterationMetrics finite;
    finite.iteration = 1;
    finite.lm_loss = 6.912345678901234;
    finite.grad_norm = 1.0e-300;
    finite.learning_rate = 1.2e-4;
    finite.loss_scale = 4294967296.0;
    finite.mfu = 0.25;
    writer.write_iteration(finite);
    IterationMetrics diverged;
    diverged.iteration = 2;
    diverged.lm_loss = kNaN;
    diverged.grad_norm = kInf;
    diverged.loss_scale = -kInf;
    diverged.tokens_per_second = kInf;  // a zero-length timing
    diverged.mfu = kNaN;
    diverged.nan_iterations = 1;
    diverged.skipped_iterations = 1;
    writer.write_iteration(diverged);
    writer.write_eval(2, kNaN);
    writer.write_eval(4, 2.5);
  }
  const auto rows = rows_of(path_);
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0]["lm_loss"].get<double>(), 6.912345678901234);
  EXPECT_EQ(rows[0]["grad_norm"].get<double>(), 1.0e-300);
  EXPECT_EQ(rows[0]["loss_scale"].get<double>(), 4294967296.0);
  EXPECT_EQ(rows[0]["mfu"].get<double>(), 0.25);
  EXPECT_EQ(rows[0]["nan_iterations"], 0);
  for (const char* key : {"lm_loss", "grad_norm", "loss_scale", "tokens_per_second", "mfu"})
    EXPECT_TRUE(rows[1][key].is_null()) << key << " = " << rows[1][key].dump();
  EXPECT_EQ(rows[1]["iteration"], 2);
  EXPECT_EQ(rows[1]["nan_iterations"], 1);
  EXPECT_EQ(rows[1]["skipped_iterations"], 1);
  EXPECT_TRUE(rows[2]["eval_loss"].is_null()) << rows[2].dump();
  EXPECT_TRUE(rows[2]["eval_perplexity"].is_null()) << rows[2].dump();
  EXPECT_EQ(rows[3]["eval_loss"].get<double>(), 2.5);
  EXPECT_DOUBLE_EQ(rows[3]["eval_perplexity"].get<double>(), std::exp(2.5));
}

TEST(Perplexity, ClipsAtTwentyAndKeepsNaN) {
  EXPECT_DOUBLE_EQ(perplexity(1.0), std::exp(1.0));
  EXPECT_DOUBLE_EQ(perplexity(kInf), std::exp(20.0));
  EXPECT_TRUE(std::isnan(perplexity(kNaN)));  // a diverged eval loss is not a perplexity of e^20
}

}  // namespace
}  // namespace tessera::train
