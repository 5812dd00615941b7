// Checks of the layout attributes a checkpoint stores per tensor (global_shape, local_shape,
// split_axis, split_offset, flat_offset, count) before any of them sizes or places a copy: a
// damaged value must be an Error naming the file and tensor, not a write outside a buffer (the
// fuzz harness test/fuzz/fuzz_checkpoint_attrs found split_offset = -5 writing before the tensor).
#pragma once
#include <cstdint>
#include <string>

#include "tessera/core/tensor.h"

namespace tessera::ckpt {

void check_stored_layout(const std::string& where, const Shape& global_shape, const Shape& local_shape,
                         int64_t split_axis, int64_t split_offset, int64_t flat_offset, int64_t count);

}  // namespace tessera::ckpt
