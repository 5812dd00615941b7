#include "tessera/runtime/agreed_failure.h"

#include <atomic>

namespace tessera {

namespace {
std::atomic<AgreedFailure> g_agreed{AgreedFailure::none};
}

void note_agreed_failure(bool this_rank_reports) {
  g_agreed = this_rank_reports ? AgreedFailure::report : AgreedFailure::silent;
}

AgreedFailure agreed_failure() { return g_agreed; }

}  // namespace tessera
