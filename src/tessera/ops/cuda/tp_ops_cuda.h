// CUDA pieces of the tensor-parallel layers (called from nn/ and parallel/ when their tensors live on
// a GPU): the vocabulary-parallel embedding lookup / gradient, the row-parallel bias add, and
// column-block copies for splitting and gathering along the last dimension. Queued on the compute
// stream, no host synchronisation. CUDA builds only.
#pragma once
#include <cstdint>

#include "tessera/core/tensor.h"

namespace tessera::ops::cuda {

// out[i] = table[ids[i] - first_id] for ids this rank holds, zero rows for the others.
void vocab_parallel_embedding_forward(const Tensor& ids, const Tensor& table, int64_t first_id, const Tensor& out);
// dtable[ids[i] - first_id] += dout[i] for the ids this rank holds (dtable: table dtype or f32).
void vocab_parallel_embedding_backward(const Tensor& ids, const Tensor& dout, int64_t first_id, const Tensor& dtable);
// out [rows, cols] += bias [cols].
void add_bias_rows(const Tensor& out, const Tensor& bias);
// dbias [cols] += column sums of dout [rows, cols] (dbias: dout's dtype or f32).
void accumulate_bias_grad(const Tensor& dout, const Tensor& dbias);
// dst [n, k] = src [n, K] columns [first_column, first_column + k).
void copy_columns(const Tensor& src, int64_t first_column, const Tensor& dst);
// dst [n, K] columns [first_column, first_column + k) = src [n, k].
void place_columns(const Tensor& src, const Tensor& dst, int64_t first_column);

}  // namespace tessera::ops::cuda
