// Global L2 gradient-norm clipping (Megatron --clip-grad): a rank's local sum of squares, the norm
// from the (later: all-reduced) total, the clip coefficient clip/(norm + 1e-6) and grad scaling.
#pragma once
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::optim {

// Sum over the tensors of sum(g^2), accumulated in double (ops::sum_of_squares). The caller
// passes only the grads this rank counts (Megatron: TP-partitioned or on TP rank 0, not the shared
// duplicate of a tied embedding), so that summing over ranks counts every gradient once.
double local_sum_of_squares(const std::vector<Tensor>& grads);

// The global L2 norm from the sum of squares over every rank: sqrt(norm_sq_total).
double finish_grad_norm(double norm_sq_total);

// Megatron's factor: clip_grad / (norm + 1e-6) when that is < 1, else 1. clip_grad <= 0 disables
// clipping (returns 1). A NaN norm gives 1 (no scaling, the step is skipped elsewhere); an
// infinite norm gives 0, as in Megatron.
double clip_coefficient(double norm, double clip_grad);

// Multiplies every grad by coefficient (nothing to do when it is 1).
void scale_grads(const std::vector<Tensor>& grads, double coefficient);

// Single-rank convenience: norm of grads, clipped in place to clip_grad; returns the norm before
// clipping (what Megatron logs as "grad norm"). Multi-rank callers use the three steps above with
// the all-reduce between local_sum_of_squares and finish_grad_norm.
double clip_grad_norm(const std::vector<Tensor>& grads, double clip_grad);

}  // namespace tessera::optim
