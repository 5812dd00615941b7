#include "tessera/train/loss_check.h"

#include <cmath>

#include "tessera/core/error.h"
#include "tessera/runtime/agreed_failure.h"

namespace tessera::train {

void check_loss_is_finite(double loss, int64_t iteration, int world_rank) {
  if (std::isfinite(loss)) return;
  note_agreed_failure(world_rank == 0);  // every rank sees the same loss: rank 0 reports
  TESSERA_FAIL("the training loss is ", loss, " at iteration ", iteration,
               "; stopping (check model.init_method_std, optimizer.lr and the data; a NaN loss does not recover)");
}

}  // namespace tessera::train
