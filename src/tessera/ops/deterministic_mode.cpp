// The process-wide deterministic mode (see deterministic_mode.h).
#include "tessera/ops/deterministic_mode.h"

#include <atomic>

namespace tessera::ops {

namespace {
std::atomic<bool> g_deterministic{false};
}  // namespace

void set_deterministic_mode(bool on) { g_deterministic.store(on, std::memory_order_relaxed); }
bool deterministic_mode() { return g_deterministic.load(std::memory_order_relaxed); }

}  // namespace tessera::ops
