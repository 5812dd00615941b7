// Communicator: the collective and point-to-point operations of one process group, one interface
// for both backends (MpiCommunicator on host tensors, NcclCommunicator on device tensors).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera {

// avg: the sum divided by the group size, in one pass (ncclAvg); the NCCL backend only.
enum class ReduceOp { sum, max, min, avg };
enum class CommBackend { mpi, nccl };
std::string reduce_op_name(ReduceOp op);
std::string comm_backend_name(CommBackend backend);
CommBackend comm_backend_from_name(const std::string& name);  // "mpi" | "nccl", else ConfigError

// One send or receive of a batch (batched_p2p): peer is a rank *within the group*.
struct P2POp {
  enum class Kind { send, recv };
  Kind kind;
  Tensor tensor;
  int peer;
  static P2POp send(Tensor t, int peer) { return {Kind::send, t, peer}; }
  static P2POp recv(Tensor t, int peer) { return {Kind::recv, t, peer}; }
};

struct CommOptions {
  // > 0: an operation not complete after this many seconds throws Error naming the group and the
  // operation (the job then ends through run_main's MPI_Abort). 0: wait forever.
  double timeout_seconds = 0;
  // NCCL only: false lets operations return once enqueued on the communicator's stream (call
  // synchronize() before reading results); true (default) waits for each one. MPI always blocks.
  bool blocking = true;
};

// Conventions for every operation:
// - Tensors must be contiguous views on this backend's device kind (host for MPI, CUDA for NCCL),
//   all with the same dtype (f32, bf16, f16, i32 or i64). Counts are in elements.
// - In place: pass the same tensor as input and output (all_reduce, reduce_scatter with the input
//   being the full buffer and output the rank's slice of it, all_gather with the input being the
//   rank's slice of the output, broadcast always in place).
// - Ranks (roots, peers) are ranks within the group, 0 .. size()-1.
// - Sizes not divisible by the group: reduce_scatter / all_gather require numel(full) =
//   size() * numel(shard); the _v variants take per-rank element counts (shard r occupies
//   [sum(counts[0..r)), +counts[r]) of the full tensor), so uneven splits are explicit.
// - bf16 / f16 sums on MPI are accumulated in float per pairwise reduction step, rounded once per step.
class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual CommBackend backend() const = 0;
  virtual const std::string& name() const = 0;         // the group's name, e.g. "tensor"
  virtual const std::vector<int>& world_ranks() const = 0;  // members, as world ranks
  int size() const { return static_cast<int>(world_ranks().size()); }
  virtual int rank() const = 0;                         // this rank within the group

  virtual void all_reduce(const Tensor& input, const Tensor& output, ReduceOp op) = 0;
  void all_reduce(const Tensor& inout, ReduceOp op = ReduceOp::sum) { all_reduce(inout, inout, op); }

  // input: size() * n elements; output: n elements = the reduction of slice rank() of every input.
  virtual void reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op) = 0;
  virtual void reduce_scatter_v(const Tensor& input, const Tensor& output, const std::vector<int64_t>& counts,
                                ReduceOp op) = 0;
  // input: n elements; output: size() * n elements, slice r = rank r's input.
  virtual void all_gather(const Tensor& input, const Tensor& output) = 0;
  virtual void all_gather_v(const Tensor& input, const Tensor& output, const std::vector<int64_t>& counts) = 0;
  virtual void broadcast(const Tensor& inout, int root) = 0;

  virtual void send(const Tensor& tensor, int peer) = 0;
  virtual void recv(const Tensor& tensor, int peer) = 0;
  // All ops of the batch are posted together and complete together (no ordering deadlock between
  // a send to the next stage and a receive from the previous one).
  virtual void batched_p2p(const std::vector<P2POp>& ops) = 0;

  // Equal splits: input and output hold size() * n elements; block r of input goes to rank r, block
  // r of output comes from rank r.
  virtual void all_to_all(const Tensor& input, const Tensor& output) = 0;
  // Variable splits: send_counts[r] elements (consecutive in input) go to rank r; recv_counts[r]
  // elements arrive from rank r (consecutive in output). Out of place only.
  virtual void all_to_all_v(const Tensor& input, const Tensor& output, const std::vector<int64_t>& send_counts,
                            const std::vector<int64_t>& recv_counts) = 0;
  virtual void barrier() = 0;

  // Waits for every operation enqueued so far (non-blocking NCCL); a no-op for MPI.
  virtual void synchronize() = 0;
  // Device backends order every operation after the compute stream's queued work and, by default,
  // the compute stream's later work after the operation. With compute_waits false, later compute
  // runs on while the operation is in flight (gradient reduction overlapping the backward); its
  // results may be read only after synchronize(). Host (MPI) communicators ignore it.
  virtual void set_compute_waits(bool) {}
};

// Shared argument checks (the messages name the group and the operation).
namespace detail {
void check_comm_dtype(const Communicator& comm, const char* op, const Tensor& t);
void check_same_dtype(const Communicator& comm, const char* op, const Tensor& a, const Tensor& b);
void check_counts(const Communicator& comm, const char* op, const std::vector<int64_t>& counts, int64_t total,
                  const char* what);
std::vector<int64_t> displacements(const std::vector<int64_t>& counts);
}  // namespace detail

}  // namespace tessera
