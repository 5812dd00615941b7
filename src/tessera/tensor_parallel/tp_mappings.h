// The conjugate communication mappings of tensor and sequence parallelism (Megatron's
// tensor_parallel/mappings.py), each with an explicit forward and backward, on row-major [n, k]
// activations whose rows are tokens in sequence-major order (so a sequence split is a row split).
// With tp.size == 1 every mapping is the identity and returns its input.
#pragma once
#include "tessera/core/buffer.h"
#include "tessera/tensor_parallel/tp_group.h"

namespace tessera::parallel {

// f, copy to the TP region: forward identity, backward all-reduce (sum) over TP.
Tensor copy_to_tp_forward(const Tensor& x, const TensorParallel& tp);
Tensor copy_to_tp_backward(Arena& arena, const Tensor& dy, const TensorParallel& tp);

// g, reduce from the TP region: forward all-reduce (sum), backward identity.
Tensor reduce_from_tp_forward(Arena& arena, const Tensor& x, const TensorParallel& tp);
Tensor reduce_from_tp_backward(const Tensor& dy, const TensorParallel& tp);

// Scatter to the TP region along the last dim: forward keeps this rank's k/tp columns, backward
// all-gathers the columns.  Gather from the TP region is its conjugate.
Tensor scatter_to_tp_last_dim_forward(Arena& arena, const Tensor& x, const TensorParallel& tp);
Tensor scatter_to_tp_last_dim_backward(Arena& arena, const Tensor& dy, const TensorParallel& tp);
Tensor gather_from_tp_last_dim_forward(Arena& arena, const Tensor& x, const TensorParallel& tp);
Tensor gather_from_tp_last_dim_backward(Arena& arena, const Tensor& dy, const TensorParallel& tp);

// Sequence parallelism (rows). scatter_to_sp: forward keeps rows [r n/tp, (r+1) n/tp), backward
// all-gathers rows. gather_from_sp: forward all-gathers rows, backward reduce-scatters rows.
// reduce_scatter_to_sp: forward reduce-scatters rows, backward all-gathers rows.
Tensor scatter_to_sp_forward(Arena& arena, const Tensor& x, const TensorParallel& tp);
Tensor scatter_to_sp_backward(Arena& arena, const Tensor& dy, const TensorParallel& tp);
Tensor gather_from_sp_forward(Arena& arena, const Tensor& x, const TensorParallel& tp);
Tensor gather_from_sp_backward(Arena& arena, const Tensor& dy, const TensorParallel& tp);
Tensor reduce_scatter_to_sp_forward(Arena& arena, const Tensor& x, const TensorParallel& tp);
Tensor reduce_scatter_to_sp_backward(Arena& arena, const Tensor& dy, const TensorParallel& tp);

}  // namespace tessera::parallel
