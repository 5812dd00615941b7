// T5's relative position bias (HF T5Attention._relative_position_bucket, Megatron's
// RelativePositionEmbedding): the distance key - query of score (i, j) falls in one of num_buckets
// buckets (bidirectional: half for each sign; causal: only keys at or before the query count, later
// ones share bucket 0), exact for distances below max_exact = buckets / 2, logarithmic up to
// max_distance, clamped beyond; each bucket has one learned value per head (weight [buckets, nh]).
// The log is taken in f32 as HF does, so bucket boundaries match it exactly.
#pragma once
#include <cstdint>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::ops {

// The bucket of relative position (key - query).
int32_t relative_position_bucket(int64_t relative_position, bool bidirectional, int64_t num_buckets,
                                 int64_t max_distance);
// Buckets of an [sq, sk] score block whose queries sit at positions query_offset + i, keys at j.
std::vector<int32_t> relative_position_buckets(int64_t sq, int64_t sk, int64_t query_offset, bool bidirectional,
                                               int64_t num_buckets, int64_t max_distance);

// out[h, i, j] = weight[buckets[i, j], h]; weight [num_buckets, nh], buckets i32 [sq, sk] (on
// weight's device), out [nh, sq, sk].
void relative_position_bias_forward(const Tensor& weight, const Tensor& buckets, const Tensor& out);
// dweight[buckets[i, j], h] += dbias[h, i, j].
void relative_position_bias_backward(const Tensor& dbias, const Tensor& buckets, const Tensor& dweight);

}  // namespace tessera::ops
