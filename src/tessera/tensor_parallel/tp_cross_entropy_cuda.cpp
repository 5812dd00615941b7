// The CUDA side of the vocabulary-parallel cross entropy (tp_cross_entropy.h): kernels from
// kernels/loss.cu with the two TP all-reduces (row max, then [target logit - max, sum exp]) between
// them, on device tensors through the tensor group's NCCL communicator. CUDA builds only.
#include <algorithm>

#include "kernels/kernels.h"
#include "tessera/core/buffer.h"
#include "tessera/ops/cuda/cuda_context.h"
#include "tessera/ops/cuda/ops_cuda.h"
#include "tessera/tensor_parallel/tp_cross_entropy_cuda.h"

namespace tessera::parallel {

namespace {
int64_t local_valid_columns(int64_t local_vocab, int64_t vocab_start, int64_t valid_vocab) {
  return std::clamp<int64_t>(valid_vocab - vocab_start, 0, local_vocab);
}

// Row maxima and sums for n rows: [n | 2n] f32, grown (never shrunk) on demand.
Tensor row_scratch(int64_t n, Device device) {
  static Buffer scratch;
  const size_t need = static_cast<size_t>(3 * n) * sizeof(float);
  if (scratch.size() < need || scratch.device() != device) {
    ops::cuda::synchronize();  // the old buffer may still be in use by queued kernels
    scratch = Buffer(need, device);
  }
  return scratch.as_tensor(DType::f32, {3 * n});
}
}  // namespace

void vocab_parallel_cross_entropy_forward_cuda(const Tensor& logits, const Tensor& targets, int64_t vocab_start,
                                               int64_t valid_vocab, const TensorParallel& tp, const Tensor& losses,
                                               const Tensor& log_sum_exp) {
  const int64_t n = logits.dim(0), vocab = logits.dim(1);
  const int64_t valid = local_valid_columns(vocab, vocab_start, valid_vocab);
  cudaStream_t stream = ops::cuda::CudaContext::get().stream();
  const Tensor scratch = row_scratch(n, logits.device());
  const Tensor row_max = scratch.rows(0, n), sums = scratch.rows(n, 3 * n);
  kernels::vocab_parallel_row_max(logits.dtype(), logits.data(), n, vocab, valid, row_max.data_as<float>(), stream);
  tp.comm->all_reduce(row_max, ReduceOp::max);
  kernels::vocab_parallel_sums(logits.dtype(), logits.data(), targets.data_as<int32_t>(), n, vocab, valid, vocab_start,
                               row_max.data_as<float>(), sums.data_as<float>(), stream);
  tp.comm->all_reduce(sums, ReduceOp::sum);
  kernels::vocab_parallel_finish(row_max.data_as<float>(), sums.data_as<float>(), n, losses.dtype(), losses.data(),
                                 log_sum_exp.data(), stream);
}

void vocab_parallel_cross_entropy_backward_cuda(const Tensor& logits, const Tensor& targets, const Tensor& log_sum_exp,
                                                const Tensor& dlosses, int64_t vocab_start, int64_t valid_vocab,
                                                const Tensor& dlogits) {
  const int64_t n = logits.dim(0), vocab = logits.dim(1);
  kernels::vocab_parallel_backward(logits.dtype(), logits.data(), targets.data_as<int32_t>(), log_sum_exp.dtype(),
                                   log_sum_exp.data(), dlosses.data(), n, vocab,
                                   local_valid_columns(vocab, vocab_start, valid_vocab), vocab_start, dlogits.data(),
                                   ops::cuda::CudaContext::get().stream());
}

}  // namespace tessera::parallel
