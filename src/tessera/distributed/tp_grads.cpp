#include "tessera/distributed/tp_grads.h"

#include <cstring>

#include "tessera/core/buffer.h"
#include "tessera/ops/elementwise.h"

namespace tessera::parallel {

void all_reduce_sequence_parallel_grads(nn::ParameterStore& store, const TensorParallel& tp) {
  if (!tp.enabled() || !tp.sequence_parallel) return;
  for (const auto& p : store.parameters())
    if (p.sequence_parallel) tp.comm->all_reduce(p.grad, ReduceOp::sum);
}

double tensor_parallel_grad_sum_of_squares(const nn::ParameterStore& store, const TensorParallel& tp) {
  double local = 0;
  for (const auto& p : store.parameters())
    if (p.split_axis >= 0 || tp.rank == 0) local += ops::sum_of_squares(p.grad);
  if (!tp.enabled()) return local;
  // Exchange the doubles bit for bit (i64) and add them in rank order: exact and identical everywhere.
  Buffer send(sizeof(int64_t)), recv(sizeof(int64_t) * static_cast<size_t>(tp.size));
  std::memcpy(send.data(), &local, sizeof(double));
  tp.comm->all_gather(send.as_tensor(DType::i64, {1}), recv.as_tensor(DType::i64, {tp.size}));
  double total = 0;
  for (int r = 0; r < tp.size; ++r) {
    double part;
    std::memcpy(&part, static_cast<const char*>(recv.data()) + r * sizeof(double), sizeof(double));
    total += part;
  }
  return total;
}

std::vector<double> gather_global(const nn::Parameter& param, const Tensor& local, const TensorParallel& tp) {
  int64_t n = local.numel();
  Buffer local64(static_cast<size_t>(n) * sizeof(double));
  Tensor l = local64.as_tensor(DType::f64, {n});
  ops::copy(local.flat(), l);
  const double* src = l.data_as<double>();
  if (param.split_axis < 0 || !tp.enabled()) return std::vector<double>(src, src + n);
  // Doubles travel as i64 bit patterns (the host communicator has no f64).
  Buffer all(static_cast<size_t>(n * tp.size) * sizeof(double));
  tp.comm->all_gather(local64.as_tensor(DType::i64, {n}), all.as_tensor(DType::i64, {n * tp.size}));
  const double* blocks = static_cast<const double*>(all.data());
  const Shape& shape = param.shape;
  auto axis = static_cast<size_t>(param.split_axis);
  int64_t inner = 1, outer = 1;
  for (size_t a = axis + 1; a < shape.size(); ++a) inner *= shape[a];
  for (size_t a = 0; a < axis; ++a) outer *= shape[a];
  int64_t local_axis = shape[axis], global_axis = local_axis * tp.size;
  std::vector<double> global(static_cast<size_t>(n * tp.size));
  for (int r = 0; r < tp.size; ++r)
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t k = 0; k < local_axis; ++k)
        std::memcpy(&global[static_cast<size_t>((o * global_axis + r * local_axis + k) * inner)],
                    blocks + r * n + (o * local_axis + k) * inner, static_cast<size_t>(inner) * sizeof(double));
  return global;
}

}  // namespace tessera::parallel
