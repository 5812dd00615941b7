// LrSchedule against hand-computed values of Megatron's OptimizerParamScheduler.get_lr for every
// decay style (warm-up, middle, end, past end), and LrScheduleConfig::validate's error messages.
#include "tessera/optim/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "tessera/core/error.h"

namespace tessera::optim {
namespace {

// lr 1.0, min_lr 0.1, 10 warm-up iterations, decay over 110 (decay phase: iterations 10..110).
LrScheduleConfig base_config(const std::string& style) {
  LrScheduleConfig config;
  config.style = style;
  config.lr = 1.0;
  config.min_lr = 0.1;
  config.warmup_iters = 10;
  config.decay_iters = 110;
  return config;
}

constexpr double kTol = 1e-12;

TEST(LrSchedule, WarmupIsLinearFromZeroForEveryStyle) {
  for (const char* style : {"constant", "linear", "cosine", "inverse-square-root", "wsd"}) {
    LrScheduleConfig config = base_config(style);
    config.wsd_decay_iters = 20;
    LrSchedule schedule(config);
    EXPECT_NEAR(schedule.lr(0), 0.0, kTol) << style;  // Megatron's first step runs at lr_warmup_init = 0
    EXPECT_NEAR(schedule.lr(1), 0.1, kTol) << style;
    EXPECT_NEAR(schedule.lr(5), 0.5, kTol) << style;
    EXPECT_NEAR(schedule.lr(10), 1.0, kTol) << style;  // n == warmup is still warm-up: reaches the peak
  }
}

TEST(LrSchedule, WarmupStartsFromWarmupInit) {
  LrScheduleConfig config = base_config("cosine");
  config.warmup_init = 0.2;
  LrSchedule schedule(config);
  EXPECT_NEAR(schedule.lr(0), 0.2, kTol);
  EXPECT_NEAR(schedule.lr(5), 0.6, kTol);  // 0.2 + (1 - 0.2) * 5/10
}

TEST(LrSchedule, Constant) {
  LrSchedule schedule(base_config("constant"));
  EXPECT_NEAR(schedule.lr(50), 1.0, kTol);
  EXPECT_NEAR(schedule.lr(110), 1.0, kTol);
  EXPECT_NEAR(schedule.lr(1000), 1.0, kTol);  // constant ignores decay_iters and min_lr
}

TEST(LrSchedule, Linear) {
  LrSchedule schedule(base_config("linear"));
  EXPECT_NEAR(schedule.lr(35), 0.775, kTol);  // r = 0.25: 0.1 + 0.9 * 0.75
  EXPECT_NEAR(schedule.lr(60), 0.55, kTol);   // r = 0.5
  EXPECT_NEAR(schedule.lr(110), 0.1, kTol);   // end
  EXPECT_NEAR(schedule.lr(111), 0.1, kTol);   // past end
  EXPECT_NEAR(schedule.lr(5000), 0.1, kTol);
}

TEST(LrSchedule, Cosine) {
  LrSchedule schedule(base_config("cosine"));
  EXPECT_NEAR(schedule.lr(35), 0.868198051533946, 1e-12);  // 0.1 + 0.9 * 0.5 (cos(pi/4) + 1)
  EXPECT_NEAR(schedule.lr(60), 0.55, kTol);
  EXPECT_NEAR(schedule.lr(85), 0.231801948466054, 1e-12);  // 0.1 + 0.9 * 0.5 (cos(3pi/4) + 1)
  EXPECT_NEAR(schedule.lr(110), 0.1, kTol);
  EXPECT_NEAR(schedule.lr(200), 0.1, kTol);
}

TEST(LrSchedule, InverseSquareRoot) {
  LrSchedule schedule(base_config("inverse-square-root"));
  EXPECT_NEAR(schedule.lr(40), 0.5, kTol);              // sqrt(10) / sqrt(40)
  EXPECT_NEAR(schedule.lr(90), 1.0 / 3.0, kTol);        // sqrt(10 / 90)
  EXPECT_NEAR(schedule.lr(110), std::sqrt(10.0 / 110.0), kTol);
  EXPECT_NEAR(schedule.lr(111), 0.1, kTol);             // past decay_iters: min_lr
  LrScheduleConfig floored = base_config("inverse-square-root");
  floored.min_lr = 0.4;
  EXPECT_NEAR(LrSchedule(floored).lr(90), 0.4, kTol);   // max(min_lr, 1/3)
}

TEST(LrSchedule, WsdStableThenAnnealWithEachDecayStyle) {
  struct Case {
    const char* wsd_style;
    double at_95;   // q = 0.25
    double at_100;  // q = 0.5
  };
  const Case cases[] = {
      {"exponential", 0.1 + 0.9 * (2.0 * std::pow(0.5, 0.25) - 1.0), 0.472792206135786},  // 2 * 0.5^q - 1
      {"linear", 0.775, 0.55},
      {"cosine", 0.868198051533946, 0.55},
      {"minus_sqrt", 0.55, 0.363603896932107},  // 1 - sqrt(q)
  };
  for (const Case& c : cases) {
    LrScheduleConfig config = base_config("wsd");
    config.wsd_decay_iters = 20;  // anneal over iterations 90..110
    config.wsd_decay_style = c.wsd_style;
    LrSchedule schedule(config);
    EXPECT_NEAR(schedule.lr(50), 1.0, kTol) << c.wsd_style;  // stable
    EXPECT_NEAR(schedule.lr(90), 1.0, kTol) << c.wsd_style;  // last stable iteration
    EXPECT_NEAR(schedule.lr(95), c.at_95, 1e-12) << c.wsd_style;
    EXPECT_NEAR(schedule.lr(100), c.at_100, 1e-12) << c.wsd_style;
    EXPECT_NEAR(schedule.lr(110), 0.1, kTol) << c.wsd_style;  // every style ends at coeff 0
    EXPECT_NEAR(schedule.lr(111), 0.1, kTol) << c.wsd_style;
  }
}

TEST(LrSchedule, WsdMegatronSpellingAndZeroAnneal) {
  LrScheduleConfig config = base_config("WSD");
  config.wsd_decay_iters = 0;  // stable to the end, then min_lr
  LrSchedule schedule(config);
  EXPECT_EQ(schedule.style(), LrDecayStyle::wsd);
  EXPECT_EQ(schedule.wsd_decay_style(), WsdDecayStyle::exponential);  // Megatron's default
  EXPECT_NEAR(schedule.lr(110), 1.0, kTol);
  EXPECT_NEAR(schedule.lr(111), 0.1, kTol);
}

TEST(LrSchedule, NoWarmupStartsAtPeak) {
  LrScheduleConfig config = base_config("linear");
  config.warmup_iters = 0;
  config.decay_iters = 100;
  LrSchedule schedule(config);
  EXPECT_NEAR(schedule.lr(0), 1.0, kTol);
  EXPECT_NEAR(schedule.lr(50), 0.55, kTol);
}

TEST(LrSchedule, IterationsMatchMegatronSampleCountingForAConstantBatch) {
  const int64_t gbs = 32;
  for (const char* style : {"constant", "linear", "cosine", "inverse-square-root", "wsd"}) {
    LrScheduleConfig config = base_config(style);
    config.wsd_decay_iters = 20;
    LrSchedule schedule(config);
    for (int64_t it : {0, 3, 10, 11, 47, 90, 99, 110, 111, 400})
      EXPECT_NEAR(schedule.lr(it), schedule.lr_at_samples(it * gbs, gbs), 1e-12) << style << " at " << it;
  }
  // The documented exception: inverse-square-root without warm-up floors the warm-up at one sample.
  LrScheduleConfig config = base_config("inverse-square-root");
  config.warmup_iters = 0;
  config.min_lr = 0.0;
  LrSchedule schedule(config);
  EXPECT_NEAR(schedule.lr(4), 0.5, kTol);                                  // 1 / sqrt(4)
  EXPECT_NEAR(schedule.lr_at_samples(4 * gbs, gbs), 1.0 / std::sqrt(128.0), kTol);  // 1 / sqrt(4 * 32)
}

std::string config_error(const LrScheduleConfig& config) {
  try {
    config.validate();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(LrScheduleConfig, DefaultsAreValid) { EXPECT_EQ(config_error(LrScheduleConfig{}), ""); }

TEST(LrScheduleConfig, MinLrAboveLr) {
  LrScheduleConfig config = base_config("cosine");
  config.min_lr = 2.0;
  std::string message = config_error(config);
  EXPECT_NE(message.find("optimizer.min_lr"), std::string::npos) << message;
  EXPECT_NE(message.find("optimizer.lr"), std::string::npos) << message;
  EXPECT_THROW(LrSchedule{config}, ConfigError);  // the constructor validates too
}

TEST(LrScheduleConfig, DecayShorterThanWarmup) {
  LrScheduleConfig config = base_config("linear");
  config.decay_iters = 5;
  std::string message = config_error(config);
  EXPECT_NE(message.find("optimizer.lr_decay_iters"), std::string::npos) << message;
  EXPECT_NE(message.find("optimizer.lr_warmup_iters"), std::string::npos) << message;
  config.decay_iters = 10;  // Megatron asserts warmup < decay, strictly
  EXPECT_NE(config_error(config).find("optimizer.lr_decay_iters"), std::string::npos);
  config.decay_iters = 0;
  config.warmup_iters = 0;
  EXPECT_NE(config_error(config).find("optimizer.lr_decay_iters"), std::string::npos);
}

TEST(LrScheduleConfig, UnknownStylesListTheAllowed) {
  LrScheduleConfig config = base_config("cosine_annealing");
  std::string message = config_error(config);
  EXPECT_NE(message.find("optimizer.lr_decay_style"), std::string::npos) << message;
  EXPECT_NE(message.find("cosine_annealing"), std::string::npos) << message;
  EXPECT_NE(message.find("inverse-square-root"), std::string::npos) << message;
  EXPECT_NE(message.find("wsd"), std::string::npos) << message;

  config = base_config("wsd");
  config.wsd_decay_style = "step";
  message = config_error(config);
  EXPECT_NE(message.find("optimizer.lr_wsd_decay_style"), std::string::npos) << message;
  EXPECT_NE(message.find("minus_sqrt"), std::string::npos) << message;
}

TEST(LrScheduleConfig, OtherRanges) {
  LrScheduleConfig config = base_config("wsd");
  config.wsd_decay_iters = 111;
  EXPECT_NE(config_error(config).find("optimizer.lr_wsd_decay_iters"), std::string::npos);
  config = base_config("cosine");
  config.min_lr = -1e-5;
  EXPECT_NE(config_error(config).find("optimizer.min_lr"), std::string::npos);
  config = base_config("cosine");
  config.warmup_iters = -1;
  EXPECT_NE(config_error(config).find("optimizer.lr_warmup_iters"), std::string::npos);
  config = base_config("cosine");
  config.warmup_init = 1.5;
  EXPECT_NE(config_error(config).find("optimizer.lr_warmup_init"), std::string::npos);
  config = base_config("cosine");
  config.lr = std::nan("");
  EXPECT_NE(config_error(config).find("optimizer.lr "), std::string::npos);
}

}  // namespace
}  // namespace tessera::optim
