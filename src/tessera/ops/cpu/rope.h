// CPU reference of rotary position embedding ("rotate_half" convention), in place on head vectors
// inside rows [seq, batch, row_width] (float, double); frequencies and angles in double.
#pragma once
#include <cstdint>

namespace tessera::ops::cpu {

// Where the rotated head vectors are: in each row, `groups` groups (group_stride elements apart) of
// `heads` consecutive vectors of head_dim (even) elements starting at element `offset`.
struct RopeGeometry {
  int64_t seq = 0, batch = 0, row_width = 0;
  int64_t offset = 0, heads = 0, head_dim = 0, groups = 1, group_stride = 0;
  int64_t rotary_dim = 0;    // rotated leading dims (even; 0 = head_dim)
  bool interleaved = false;  // pairs (2i, 2i+1) instead of (i, i + rotary_dim/2)
};

// For pair (i, i + half) of a vector at position p, angle = p * theta^(-2i/head_dim):
// x1' = x1 cos - x2 sin, x2' = x2 cos + x1 sin (inverse: angle negated). positions: nullptr
// (position = sequence index), [seq], [batch, seq] when positions_per_batch, or [seq * batch] (one per
// row) when positions_per_row.
template <typename T>
void rope_apply(T* rows, const RopeGeometry& g, double theta, const int32_t* positions, bool positions_per_batch,
                bool inverse, bool positions_per_row = false);

}  // namespace tessera::ops::cpu
