// The process-wide deterministic mode of the CUDA ops (training.deterministic_mode, Megatron's
// --deterministic-mode). On: every CUDA reduction runs in a fixed order (per-block partial sums
// reduced by a second pass in block order, no float atomics) and cuBLASLt GEMMs use no split-K, so
// two runs of the same job give bitwise the same results. Off (the default): the faster atomic paths.
// The CPU ops are deterministic either way. Set once at start (tessera-train), before any op runs.
#pragma once

namespace tessera::ops {

void set_deterministic_mode(bool on);
bool deterministic_mode();

}  // namespace tessera::ops
