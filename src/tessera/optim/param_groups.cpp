#include "tessera/optim/param_groups.h"

namespace tessera::optim {

bool default_weight_decay(std::string_view name, const Shape& shape) {
  return !(name.ends_with(".bias") || shape.size() == 1);
}

}  // namespace tessera::optim
