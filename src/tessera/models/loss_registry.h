// The loss registry: training.loss names a TokenLoss (token_loss.h). Built-in: "lm" (the token mean
// of the cross entropy, Megatron's loss) and "keytoken_weighted" (the Accelerate guide's
// GPTTrainStepWithCustomLoss). A plugin registers its own loss before the config is loaded
// (examples/custom_loss): its parameters become keys of the [loss] config table, listed in --help
// and type-checked like every other key.
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "tessera/models/token_loss.h"

namespace tessera::models {

using LossParamValue = std::variant<int64_t, double, std::string, std::vector<int64_t>>;

// One parameter of a loss: the config key loss.<key>, its default (which fixes its type) and help.
struct LossParamSpec {
  std::string key;
  LossParamValue default_value;
  std::string help;
};

// The resolved [loss] values of the chosen loss (defaults filled in).
class LossParams {
 public:
  explicit LossParams(std::map<std::string, LossParamValue> values = {}) : values_(std::move(values)) {}
  int64_t integer(const std::string& key) const { return std::get<int64_t>(at(key)); }
  double number(const std::string& key) const { return std::get<double>(at(key)); }
  const std::string& text(const std::string& key) const { return std::get<std::string>(at(key)); }
  const std::vector<int64_t>& integers(const std::string& key) const { return std::get<std::vector<int64_t>>(at(key)); }

 private:
  const LossParamValue& at(const std::string& key) const;
  std::map<std::string, LossParamValue> values_;
};

struct LossRegistration {
  std::string name;  // training.loss
  std::string help;
  std::vector<LossParamSpec> params;
  // Builds the loss; throws ConfigError (naming loss.<key>) on a bad parameter value.
  std::function<std::shared_ptr<const TokenLoss>(const LossParams&)> build;
};

// Adds a loss (ConfigError when the name or one of its parameter keys is taken by another loss).
void register_loss(LossRegistration registration);
// Every registered loss, built-ins first, in registration order (addresses stay valid).
const std::deque<LossRegistration>& registered_losses();
// The registration of training.loss = name; ConfigError listing the registered names otherwise.
const LossRegistration& loss_registration(const std::string& name);
// Which loss declares loss.<key> (nullptr: none).
const LossRegistration* loss_declaring(const std::string& key);

}  // namespace tessera::models
