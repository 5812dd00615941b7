// Gradient bookkeeping of tensor parallelism: the TP all-reduce of replicated parameters whose
// gradients are partial under sequence parallelism (Megatron's finalize_model_grads step), the
// gradient sum of squares over the TP group counting each gradient once, and gathering a
// parameter's global tensor from its TP slices (Parameter::split_axis / split_offset).
#pragma once
#include <vector>

#include "tessera/nn/parameter_store.h"
#include "tessera/tensor_parallel/tp_group.h"

namespace tessera::parallel {

// Sum over TP of the grads of parameters flagged sequence_parallel (no-op without SP).
void all_reduce_sequence_parallel_grads(nn::ParameterStore& store, const TensorParallel& tp);

// Sum of squares of every gradient of the TP group: split parameters on every rank, replicated
// ones on TP rank 0 only, combined exactly (in double, same order on every rank).
double tensor_parallel_grad_sum_of_squares(const nn::ParameterStore& store, const TensorParallel& tp);

// The global tensor of one parameter (value or grad view `local` of param) as doubles, gathered
// over TP; replicated parameters are returned as they are. Collective over the TP group.
std::vector<double> gather_global(const nn::Parameter& param, const Tensor& local, const TensorParallel& tp);

}  // namespace tessera::parallel
