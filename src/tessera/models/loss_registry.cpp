#include "tessera/models/loss_registry.h"

#include <sstream>

#include "tessera/core/error.h"
#include "tessera/models/keytoken_loss.h"
#include "tessera/models/lm_loss.h"

namespace tessera::models {

namespace {
// A deque: registrations keep their addresses (config keys view their strings).
std::deque<LossRegistration>& registry() {
  static std::deque<LossRegistration> table = [] {
    std::deque<LossRegistration> builtins;
    builtins.push_back({"lm", "mean cross entropy over the tokens the loss mask keeps (Megatron's LM loss)", {},
                        [](const LossParams&) { return std::make_shared<const LmLoss>(); }});
    builtins.push_back(keytoken_weighted_registration());
    return builtins;
  }();
  return table;
}
}  // namespace

const LossParamValue& LossParams::at(const std::string& key) const {
  auto it = values_.find(key);
  TESSERA_CHECK(it != values_.end(), "loss parameter loss.", key, " was not resolved");
  return it->second;
}

void register_loss(LossRegistration registration) {
  for (const auto& existing : registry()) {
    if (existing.name == registration.name)
      TESSERA_CONFIG_FAIL("training.loss = \"", registration.name, "\" is registered twice");
    for (const auto& mine : registration.params)
      for (const auto& theirs : existing.params)
        if (mine.key == theirs.key)
          TESSERA_CONFIG_FAIL("loss.", mine.key, " of loss \"", registration.name, "\" is already a parameter of loss \"",
                              existing.name, "\"; choose another key");
  }
  registry().push_back(std::move(registration));
}

const std::deque<LossRegistration>& registered_losses() { return registry(); }

const LossRegistration& loss_registration(const std::string& name) {
  for (const auto& r : registry())
    if (r.name == name) return r;
  std::ostringstream known;
  for (const auto& r : registry()) known << (known.tellp() > 0 ? ", " : "") << r.name;
  TESSERA_CONFIG_FAIL("training.loss = \"", name, "\" is not a registered loss; registered: ", known.str());
}

const LossRegistration* loss_declaring(const std::string& key) {
  for (const auto& r : registry())
    for (const auto& p : r.params)
      if (p.key == key) return &r;
  return nullptr;
}

}  // namespace tessera::models
