// NcclCommunicator's operations: NCCL collectives on the communicator's stream, v-collectives as
// grouped ncclReduce / ncclBroadcast, all-to-all as grouped send/recv, polling waits with timeout.
#include <sched.h>

#include <chrono>
#include <cstring>

#include "tessera/runtime/compute_stream.h"
#include "tessera/core/cuda_check.h"
#include "tessera/runtime/mpi_check.h"
#include "tessera/runtime/nccl_communicator.h"

namespace tessera {

namespace {

ncclDataType_t nccl_datatype(DType dtype) {
  switch (dtype) {
    case DType::f32: return ncclFloat32;
    case DType::bf16: return ncclBfloat16;
    case DType::f16: return ncclFloat16;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    default: break;
  }
  TESSERA_FAIL("no NCCL datatype for ", dtype_name(dtype), "; communicators support f32, bf16, f16, i32, i64");
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::max: return ncclMax;
    case ReduceOp::min: return ncclMin;
    case ReduceOp::avg: return ncclAvg;
  }
  return ncclSum;
}

char* bytes(const Tensor& t) { return static_cast<char*>(t.data()); }

// ncclGroupStart / ncclGroupEnd as a scope, so a throw inside still closes the group.
struct NcclGroup {
  NcclGroup() { TESSERA_NCCL_CHECK(ncclGroupStart()); }
  ~NcclGroup() {
    if (!closed) (void)ncclGroupEnd();  // only on an exception path: the first error is reported
  }
  void end() {
    closed = true;
    TESSERA_NCCL_CHECK(ncclGroupEnd());
  }
  bool closed = false;
};

}  // namespace

NcclCommunicator::NcclCommunicator(MPI_Comm group_comm, std::vector<int> world_ranks, std::string name, Device device,
                                   CommOptions options)
    : world_ranks_(std::move(world_ranks)), name_(std::move(name)), device_(device), options_(options) {
  TESSERA_CHECK(group_comm != MPI_COMM_NULL, "group '", name_, "': this rank is not a member");
  TESSERA_CHECK(device.is_cuda(), "NCCL communicator for group '", name_, "' needs a CUDA device, got ", device.name());
  int size = 0;
  TESSERA_MPI_CHECK(MPI_Comm_rank(group_comm, &rank_));
  TESSERA_MPI_CHECK(MPI_Comm_size(group_comm, &size));
  TESSERA_CHECK(size == static_cast<int>(world_ranks_.size()), "group '", name_, "': MPI communicator has ", size,
                " ranks but ", world_ranks_.size(), " were listed");
  TESSERA_CUDA_CHECK(cudaSetDevice(device.index));
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (rank_ == 0) TESSERA_NCCL_CHECK(ncclGetUniqueId(&id));
  TESSERA_MPI_CHECK(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, group_comm));
  TESSERA_NCCL_CHECK(ncclCommInitRank(&comm_, size, id, rank_));
  TESSERA_CUDA_CHECK(cudaStreamCreate(&stream_));
  TESSERA_CUDA_CHECK(cudaMalloc(&scratch_, sizeof(int32_t)));
  TESSERA_CUDA_CHECK(cudaMemset(scratch_, 0, sizeof(int32_t)));
  TESSERA_CUDA_CHECK(cudaEventCreateWithFlags(&compute_ready_, cudaEventDisableTiming));
  TESSERA_CUDA_CHECK(cudaEventCreateWithFlags(&comm_done_, cudaEventDisableTiming));
  host_ = std::make_unique<MpiCommunicator>(group_comm, world_ranks_, name_, CommOptions{options_.timeout_seconds, true});
}

NcclCommunicator::~NcclCommunicator() {
  // Destructors never throw: release what exists, ignoring errors (the job may be ending on one).
  if (comm_) {
    if (aborted_) ncclCommAbort(comm_);
    else ncclCommDestroy(comm_);
  }
  if (stream_) cudaStreamDestroy(stream_);
  if (compute_ready_) cudaEventDestroy(compute_ready_);
  if (comm_done_) cudaEventDestroy(comm_done_);
  if (scratch_) cudaFree(scratch_);
}

void NcclCommunicator::begin(const char* op) {
  if (aborted_)
    TESSERA_FAIL(op, " on group '", name_, "' (nccl): the communicator was aborted after an earlier error");
  TESSERA_CUDA_CHECK(cudaSetDevice(device_.index));
  pending_op_ = op;
  cudaStream_t compute = compute_stream();
  TESSERA_CUDA_CHECK(cudaEventRecord(compute_ready_, compute));
  TESSERA_CUDA_CHECK(cudaStreamWaitEvent(stream_, compute_ready_, 0));
}

void NcclCommunicator::finish(const char* op) {
  if (compute_waits_) {
    TESSERA_CUDA_CHECK(cudaEventRecord(comm_done_, stream_));
    TESSERA_CUDA_CHECK(cudaStreamWaitEvent(compute_stream(), comm_done_, 0));
  }
  if (options_.blocking) wait(op);
}

void NcclCommunicator::synchronize() {
  if (!aborted_) wait(pending_op_);
}

void NcclCommunicator::wait(const char* op) {
  auto start = std::chrono::steady_clock::now();
  for (long spins = 0;; ++spins) {
    cudaError_t rc = cudaStreamQuery(stream_);
    if (rc == cudaSuccess) return;
    if (rc != cudaErrorNotReady) TESSERA_CUDA_CHECK(rc);
    ncclResult_t async = ncclSuccess;
    TESSERA_NCCL_CHECK(ncclCommGetAsyncError(comm_, &async));
    if (async != ncclSuccess && async != ncclInProgress) {
      aborted_ = true;
      ncclCommAbort(comm_);
      comm_ = nullptr;
      TESSERA_FAIL(op, " on group '", name_, "' (nccl, ", size(), " ranks) failed asynchronously: ",
                   ncclGetErrorString(async));
    }
    if (options_.timeout_seconds > 0 && (spins & 1023) == 0) {
      double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (waited > options_.timeout_seconds) {
        aborted_ = true;
        ncclCommAbort(comm_);
        comm_ = nullptr;
        TESSERA_FAIL(op, " on group '", name_, "' (nccl, ", size(), " ranks) did not complete within ",
                     options_.timeout_seconds,
                     " s: another rank of the group is missing from the collective or stuck; communicator aborted");
      }
    }
    if ((spins & 63) == 63) sched_yield();
  }
}

void NcclCommunicator::check_peer(int peer, const char* op) const {
  if (peer < 0 || peer >= size())
    TESSERA_FAIL(op, " on group '", name_, "': peer ", peer, " is outside the group of ", size(), " ranks");
}

void NcclCommunicator::all_reduce(const Tensor& input, const Tensor& output, ReduceOp op) {
  if (on_host(input)) return host_->all_reduce(input, output, op);
  detail::check_same_dtype(*this, "all_reduce", input, output);
  TESSERA_CHECK(input.numel() == output.numel(), "all_reduce on group '", name_, "': input ", input.describe(),
                " and output ", output.describe(), " differ in size");
  begin("all_reduce");
  TESSERA_NCCL_CHECK(ncclAllReduce(input.data(), output.data(), input.numel(), nccl_datatype(input.dtype()),
                                   nccl_op(op), comm_, stream_));
  finish("all_reduce");
}

void NcclCommunicator::reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op) {
  if (on_host(input)) return host_->reduce_scatter(input, output, op);
  detail::check_same_dtype(*this, "reduce_scatter", input, output);
  TESSERA_CHECK(input.numel() == output.numel() * size(), "reduce_scatter on group '", name_, "': input ",
                input.describe(), " must hold ", size(), " x the output ", output.describe(),
                " (use reduce_scatter_v for uneven shards)");
  begin("reduce_scatter");
  // NCCL's in-place convention (output = input + rank * count) is Tessera's.
  TESSERA_NCCL_CHECK(ncclReduceScatter(input.data(), output.data(), output.numel(), nccl_datatype(input.dtype()),
                                       nccl_op(op), comm_, stream_));
  finish("reduce_scatter");
}

void NcclCommunicator::reduce_scatter_v(const Tensor& input, const Tensor& output, const std::vector<int64_t>& counts,
                                        ReduceOp op) {
  if (on_host(input)) return host_->reduce_scatter_v(input, output, counts, op);
  detail::check_same_dtype(*this, "reduce_scatter", input, output);
  detail::check_counts(*this, "reduce_scatter", counts, input.numel(), "counts");
  TESSERA_CHECK(output.numel() == counts[rank_], "reduce_scatter on group '", name_, "': output ", output.describe(),
                " must hold counts[", rank_, "] = ", counts[rank_], " elements");
  size_t esize = dtype_size(input.dtype());
  std::vector<int64_t> displs = detail::displacements(counts);
  begin("reduce_scatter");
  {
    NcclGroup group;
    for (int r = 0; r < size(); ++r) {
      if (counts[r] == 0) continue;
      void* recv = r == rank_ ? output.data() : nullptr;
      TESSERA_NCCL_CHECK(ncclReduce(bytes(input) + displs[r] * esize, recv, counts[r], nccl_datatype(input.dtype()),
                                    nccl_op(op), r, comm_, stream_));
    }
    group.end();
  }
  finish("reduce_scatter");
}

void NcclCommunicator::all_gather(const Tensor& input, const Tensor& output) {
  if (on_host(output)) return host_->all_gather(input, output);
  detail::check_same_dtype(*this, "all_gather", input, output);
  TESSERA_CHECK(output.numel() == input.numel() * size(), "all_gather on group '", name_, "': output ",
                output.describe(), " must hold ", size(), " x the input ", input.describe(),
                " (use all_gather_v for uneven shards)");
  begin("all_gather");
  TESSERA_NCCL_CHECK(ncclAllGather(input.data(), output.data(), input.numel(), nccl_datatype(input.dtype()), comm_,
                                   stream_));
  finish("all_gather");
}

void NcclCommunicator::all_gather_v(const Tensor& input, const Tensor& output, const std::vector<int64_t>& counts) {
  if (on_host(output)) return host_->all_gather_v(input, output, counts);
  detail::check_same_dtype(*this, "all_gather", input, output);
  detail::check_counts(*this, "all_gather", counts, output.numel(), "counts");
  TESSERA_CHECK(input.numel() == counts[rank_], "all_gather on group '", name_, "': input ", input.describe(),
                " must hold counts[", rank_, "] = ", counts[rank_], " elements");
  size_t esize = dtype_size(input.dtype());
  std::vector<int64_t> displs = detail::displacements(counts);
  begin("all_gather");
  {
    NcclGroup group;
    for (int r = 0; r < size(); ++r) {
      if (counts[r] == 0) continue;
      const void* send = r == rank_ ? input.data() : nullptr;
      TESSERA_NCCL_CHECK(ncclBroadcast(send, bytes(output) + displs[r] * esize, counts[r],
                                       nccl_datatype(input.dtype()), r, comm_, stream_));
    }
    group.end();
  }
  finish("all_gather");
}

void NcclCommunicator::broadcast(const Tensor& inout, int root) {
  if (on_host(inout)) return host_->broadcast(inout, root);
  detail::check_comm_dtype(*this, "broadcast", inout);
  check_peer(root, "broadcast");
  begin("broadcast");
  TESSERA_NCCL_CHECK(ncclBroadcast(inout.data(), inout.data(), inout.numel(), nccl_datatype(inout.dtype()), root,
                                   comm_, stream_));
  finish("broadcast");
}

void NcclCommunicator::send(const Tensor& tensor, int peer) { batched_p2p({P2POp::send(tensor, peer)}); }
void NcclCommunicator::recv(const Tensor& tensor, int peer) { batched_p2p({P2POp::recv(tensor, peer)}); }

void NcclCommunicator::batched_p2p(const std::vector<P2POp>& ops) {
  const char* name = ops.size() == 1 ? (ops[0].kind == P2POp::Kind::send ? "send" : "recv") : "batched_p2p";
  for (const P2POp& p : ops) {
    detail::check_comm_dtype(*this, name, p.tensor);
    check_peer(p.peer, name);
  }
  begin(name);
  {
    NcclGroup group;
    for (const P2POp& p : ops) {
      if (p.tensor.numel() == 0) continue;
      if (p.kind == P2POp::Kind::send)
        TESSERA_NCCL_CHECK(ncclSend(p.tensor.data(), p.tensor.numel(), nccl_datatype(p.tensor.dtype()), p.peer, comm_,
                                    stream_));
      else
        TESSERA_NCCL_CHECK(ncclRecv(p.tensor.data(), p.tensor.numel(), nccl_datatype(p.tensor.dtype()), p.peer, comm_,
                                    stream_));
    }
    group.end();
  }
  finish(name);
}

void NcclCommunicator::all_to_all(const Tensor& input, const Tensor& output) {
  TESSERA_CHECK(input.numel() == output.numel() && input.numel() % size() == 0, "all_to_all on group '", name_,
                "': input ", input.describe(), " and output ", output.describe(),
                " must have the same size, divisible by the group size ", size(), " (use all_to_all_v otherwise)");
  std::vector<int64_t> counts(size(), input.numel() / size());
  if (input.numel() > 0 && input.data() == output.data()) {
    // In place: stage the input in a temporary device buffer (ordered on our stream).
    detail::check_comm_dtype(*this, "all_to_all", input);
    begin("all_to_all");
    void* staged = nullptr;
    TESSERA_CUDA_CHECK(cudaMallocAsync(&staged, input.nbytes(), stream_));
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(staged, input.data(), input.nbytes(), cudaMemcpyDeviceToDevice, stream_));
    all_to_all_v(Tensor(staged, input.dtype(), input.shape(), input.device()), output, counts, counts);
    TESSERA_CUDA_CHECK(cudaFreeAsync(staged, stream_));
    return;
  }
  all_to_all_v(input, output, counts, counts);
}

void NcclCommunicator::all_to_all_v(const Tensor& input, const Tensor& output, const std::vector<int64_t>& send_counts,
                                    const std::vector<int64_t>& recv_counts) {
  detail::check_same_dtype(*this, "all_to_all", input, output);
  detail::check_counts(*this, "all_to_all", send_counts, input.numel(), "send counts");
  detail::check_counts(*this, "all_to_all", recv_counts, output.numel(), "receive counts");
  TESSERA_CHECK(input.numel() == 0 || input.data() != output.data(), "all_to_all_v on group '", name_,
                "' is out of place only");
  size_t esize = dtype_size(input.dtype());
  std::vector<int64_t> sd = detail::displacements(send_counts), rd = detail::displacements(recv_counts);
  ncclDataType_t type = nccl_datatype(input.dtype());
  begin("all_to_all");
  {
    NcclGroup group;
    for (int r = 0; r < size(); ++r) {
      if (send_counts[r] > 0)
        TESSERA_NCCL_CHECK(ncclSend(bytes(input) + sd[r] * esize, send_counts[r], type, r, comm_, stream_));
      if (recv_counts[r] > 0)
        TESSERA_NCCL_CHECK(ncclRecv(bytes(output) + rd[r] * esize, recv_counts[r], type, r, comm_, stream_));
    }
    group.end();
  }
  finish("all_to_all");
}

void NcclCommunicator::barrier() {
  begin("barrier");
  TESSERA_NCCL_CHECK(ncclAllReduce(scratch_, scratch_, 1, ncclInt32, ncclSum, comm_, stream_));
  wait("barrier");  // a barrier always blocks
}

}  // namespace tessera
