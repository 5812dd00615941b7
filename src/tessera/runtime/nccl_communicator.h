// NcclCommunicator: a Communicator over NCCL on device tensors. The unique id is broadcast over the
// group's MPI communicator; work runs on one dedicated stream, ordered after the compute stream's
// queued work by an event and before its later work by another; waits poll NCCL's async errors.
// Host tensors (scalars such as loss sums and norms) go over the same group through MPI.
// CUDA builds only (included from *_nccl.cpp files and code under TESSERA_HAVE_CUDA).
#pragma once
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <memory>

#include "tessera/runtime/communicator.h"
#include "tessera/runtime/mpi_communicator.h"

namespace tessera {

class NcclCommunicator : public Communicator {
 public:
  // Collective over `group_comm` (every member calls it): rank 0 creates the NCCL unique id and
  // broadcasts it; every rank then joins with ncclCommInitRank on `device`.
  NcclCommunicator(MPI_Comm group_comm, std::vector<int> world_ranks, std::string name, Device device,
                   CommOptions options = {});
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  CommBackend backend() const override { return CommBackend::nccl; }
  const std::string& name() const override { return name_; }
  const std::vector<int>& world_ranks() const override { return world_ranks_; }
  int rank() const override { return rank_; }
  // The stream every operation is enqueued on. Each operation first waits for the work queued so far
  // on the compute stream (CudaContext) and the compute stream then waits for the operation.
  cudaStream_t stream() const { return stream_; }
  ncclComm_t nccl_comm() const { return comm_; }

  void all_reduce(const Tensor& input, const Tensor& output, ReduceOp op) override;
  using Communicator::all_reduce;
  void reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op) override;
  void reduce_scatter_v(const Tensor& input, const Tensor& output, const std::vector<int64_t>& counts,
                        ReduceOp op) override;
  void all_gather(const Tensor& input, const Tensor& output) override;
  void all_gather_v(const Tensor& input, const Tensor& output, const std::vector<int64_t>& counts) override;
  void broadcast(const Tensor& inout, int root) override;
  void send(const Tensor& tensor, int peer) override;
  void recv(const Tensor& tensor, int peer) override;
  void batched_p2p(const std::vector<P2POp>& ops) override;
  void all_to_all(const Tensor& input, const Tensor& output) override;
  void all_to_all_v(const Tensor& input, const Tensor& output, const std::vector<int64_t>& send_counts,
                    const std::vector<int64_t>& recv_counts) override;
  void barrier() override;
  void synchronize() override;
  void set_compute_waits(bool waits) override { compute_waits_ = waits; }

 private:
  void begin(const char* op);    // checks the communicator is usable, sets the device, orders after compute
  void finish(const char* op);   // orders compute after the operation; waits if blocking
  bool on_host(const Tensor& t) const { return t.numel() > 0 && t.device().is_cpu(); }
  void wait(const char* op);     // polls the stream, NCCL async errors and the timeout
  void check_peer(int peer, const char* op) const;

  std::vector<int> world_ranks_;
  std::string name_;
  Device device_;
  CommOptions options_;
  int rank_ = 0;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  void* scratch_ = nullptr;  // 1 int32 on the device for barrier()
  cudaEvent_t compute_ready_ = nullptr, comm_done_ = nullptr;
  std::unique_ptr<MpiCommunicator> host_;  // the same group over MPI, for host tensors
  const char* pending_op_ = "synchronize";  // the last operation enqueued (for error messages)
  bool aborted_ = false;
  bool compute_waits_ = true;
};

}  // namespace tessera
