#include "tessera/runtime/communicator.h"

#include "tessera/core/error.h"

namespace tessera {

std::string reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
    case ReduceOp::avg: return "avg";
  }
  return "unknown";
}

std::string comm_backend_name(CommBackend backend) { return backend == CommBackend::mpi ? "mpi" : "nccl"; }

CommBackend comm_backend_from_name(const std::string& name) {
  if (name == "mpi") return CommBackend::mpi;
  if (name == "nccl") return CommBackend::nccl;
  TESSERA_CONFIG_FAIL("communication backend \"", name, "\" is not allowed; use \"mpi\" (CPU tensors) or \"nccl\" (GPU tensors)");
}

namespace detail {

void check_comm_dtype(const Communicator& comm, const char* op, const Tensor& t) {
  DType d = t.dtype();
  if (d != DType::f32 && d != DType::bf16 && d != DType::f16 && d != DType::i32 && d != DType::i64)
    TESSERA_FAIL(op, " on group '", comm.name(), "': dtype ", dtype_name(d),
                 " is not supported; allowed: f32, bf16, f16, i32, i64");
  bool want_cuda = comm.backend() == CommBackend::nccl;
  if (t.numel() > 0 && t.device().is_cuda() != want_cuda)
    TESSERA_FAIL(op, " on group '", comm.name(), "' (", comm_backend_name(comm.backend()), "): tensor ",
                 t.describe(), " must live on ", want_cuda ? "a CUDA device" : "the CPU");
}

void check_same_dtype(const Communicator& comm, const char* op, const Tensor& a, const Tensor& b) {
  check_comm_dtype(comm, op, a);
  check_comm_dtype(comm, op, b);
  if (a.dtype() != b.dtype())
    TESSERA_FAIL(op, " on group '", comm.name(), "': input ", a.describe(), " and output ", b.describe(),
                 " differ in dtype");
}

void check_counts(const Communicator& comm, const char* op, const std::vector<int64_t>& counts, int64_t total,
                  const char* what) {
  if (static_cast<int>(counts.size()) != comm.size())
    TESSERA_FAIL(op, " on group '", comm.name(), "': ", counts.size(), " ", what, " given for a group of ",
                 comm.size());
  int64_t sum = 0;
  for (int64_t c : counts) {
    if (c < 0) TESSERA_FAIL(op, " on group '", comm.name(), "': negative ", what);
    sum += c;
  }
  if (sum != total)
    TESSERA_FAIL(op, " on group '", comm.name(), "': ", what, " sum to ", sum, " elements but the tensor has ", total);
}

std::vector<int64_t> displacements(const std::vector<int64_t>& counts) {
  std::vector<int64_t> d(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) d[i] = d[i - 1] + counts[i - 1];
  return d;
}

}  // namespace detail
}  // namespace tessera
