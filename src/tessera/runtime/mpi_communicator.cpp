#include "tessera/runtime/mpi_communicator.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>

#include "tessera/runtime/mpi_check.h"
#include "tessera/runtime/mpi_types.h"

namespace tessera {

namespace {

int as_mpi_count(int64_t n, const std::string& group, const char* op) {
  if (n > INT_MAX)
    TESSERA_FAIL(op, " on group '", group, "': ", n, " elements exceed MPI's int count limit (", INT_MAX, ")");
  return static_cast<int>(n);
}

std::vector<int> as_mpi_counts(const std::vector<int64_t>& v, const std::string& group, const char* op) {
  std::vector<int> r;
  for (int64_t x : v) r.push_back(as_mpi_count(x, group, op));
  return r;
}

char* bytes(const Tensor& t) { return static_cast<char*>(t.data()); }

}  // namespace

MPI_Comm split_into_groups(MPI_Comm parent, const std::vector<std::vector<int>>& groups) {
  int me = 0;
  TESSERA_MPI_CHECK(MPI_Comm_rank(parent, &me));
  int color = MPI_UNDEFINED, key = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    auto it = std::find(groups[g].begin(), groups[g].end(), me);
    if (it != groups[g].end()) {
      color = static_cast<int>(g);
      key = static_cast<int>(it - groups[g].begin());
    }
  }
  MPI_Comm out = MPI_COMM_NULL;
  TESSERA_MPI_CHECK(MPI_Comm_split(parent, color, key, &out));
  return out;
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::vector<int> world_ranks, std::string name, CommOptions options)
    : world_ranks_(std::move(world_ranks)), name_(std::move(name)), options_(options) {
  TESSERA_CHECK(comm != MPI_COMM_NULL, "group '", name_, "': this rank is not a member");
  TESSERA_MPI_CHECK(MPI_Comm_dup(comm, &comm_));
  int size = 0;
  TESSERA_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  TESSERA_MPI_CHECK(MPI_Comm_size(comm_, &size));
  TESSERA_CHECK(size == static_cast<int>(world_ranks_.size()), "group '", name_, "': MPI communicator has ", size,
                " ranks but ", world_ranks_.size(), " were listed");
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (comm_ != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm_);
}

void MpiCommunicator::wait(std::vector<MPI_Request>& requests, const char* op) {
  int n = static_cast<int>(requests.size());
  if (options_.timeout_seconds <= 0) {
    TESSERA_MPI_CHECK(MPI_Waitall(n, requests.data(), MPI_STATUSES_IGNORE));
    return;
  }
  auto start = std::chrono::steady_clock::now();
  while (true) {
    int done = 0;
    TESSERA_MPI_CHECK(MPI_Testall(n, requests.data(), &done, MPI_STATUSES_IGNORE));
    if (done) return;
    double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (waited > options_.timeout_seconds)
      TESSERA_FAIL(op, " on group '", name_, "' (mpi, ", size(), " ranks) did not complete within ",
                   options_.timeout_seconds, " s: another rank of the group is missing from the collective or stuck");
    sched_yield();
  }
}

void MpiCommunicator::check_peer(int peer, const char* op) const {
  if (peer < 0 || peer >= size())
    TESSERA_FAIL(op, " on group '", name_, "': peer ", peer, " is outside the group of ", size(), " ranks");
}

void MpiCommunicator::all_reduce(const Tensor& input, const Tensor& output, ReduceOp op) {
  detail::check_same_dtype(*this, "all_reduce", input, output);
  TESSERA_CHECK(input.numel() == output.numel(), "all_reduce on group '", name_, "': input ", input.describe(),
                " and output ", output.describe(), " differ in size");
  int n = as_mpi_count(input.numel(), name_, "all_reduce");
  std::vector<MPI_Request> req(1);
  const void* send = input.data() == output.data() ? MPI_IN_PLACE : input.data();
  TESSERA_MPI_CHECK(MPI_Iallreduce(send, output.data(), n, detail::mpi_datatype(input.dtype()),
                                   detail::mpi_reduce_op(input.dtype(), op), comm_, &req[0]));
  wait(req, "all_reduce");
}

void MpiCommunicator::reduce_scatter(const Tensor& input, const Tensor& output, ReduceOp op) {
  TESSERA_CHECK(input.numel() == output.numel() * size(), "reduce_scatter on group '", name_, "': input ",
                input.describe(), " must hold ", size(), " x the output ", output.describe(),
                " (use reduce_scatter_v for uneven shards)");
  reduce_scatter_v(input, output, std::vector<int64_t>(size(), output.numel()), op);
}

void MpiCommunicator::reduce_scatter_v(const Tensor& input, const Tensor& output, const std::vector<int64_t>& counts,
                                       ReduceOp op) {
  detail::check_same_dtype(*this, "reduce_scatter", input, output);
  detail::check_counts(*this, "reduce_scatter", counts, input.numel(), "counts");
  TESSERA_CHECK(output.numel() == counts[rank_], "reduce_scatter on group '", name_, "': output ", output.describe(),
                " must hold counts[", rank_, "] = ", counts[rank_], " elements");
  size_t esize = dtype_size(input.dtype());
  std::vector<int64_t> displs = detail::displacements(counts);
  char* my_slice = bytes(input) + displs[rank_] * esize;
  bool in_place = output.data() == my_slice;
  bool overlaps = bytes(output) < bytes(input) + input.nbytes() && bytes(input) < bytes(output) + output.nbytes();
  TESSERA_CHECK(in_place || !overlaps, "reduce_scatter on group '", name_,
                "': in place, the output must be exactly this rank's slice of the input");
  std::vector<int> mpi_counts = as_mpi_counts(counts, name_, "reduce_scatter");
  MPI_Datatype type = detail::mpi_datatype(input.dtype());
  MPI_Op mpi_op = detail::mpi_reduce_op(input.dtype(), op);
  std::vector<MPI_Request> req(1);
  if (in_place) {
    // MPI_IN_PLACE leaves the result at the start of the receive buffer (the whole input).
    TESSERA_MPI_CHECK(MPI_Ireduce_scatter(MPI_IN_PLACE, input.data(), mpi_counts.data(), type, mpi_op, comm_, &req[0]));
    wait(req, "reduce_scatter");
    if (my_slice != bytes(input)) std::memmove(my_slice, input.data(), counts[rank_] * esize);
  } else {
    TESSERA_MPI_CHECK(MPI_Ireduce_scatter(input.data(), output.data(), mpi_counts.data(), type, mpi_op, comm_, &req[0]));
    wait(req, "reduce_scatter");
  }
}

void MpiCommunicator::all_gather(const Tensor& input, const Tensor& output) {
  TESSERA_CHECK(output.numel() == input.numel() * size(), "all_gather on group '", name_, "': output ",
                output.describe(), " must hold ", size(), " x the input ", input.describe(),
                " (use all_gather_v for uneven shards)");
  all_gather_v(input, output, std::vector<int64_t>(size(), input.numel()));
}

void MpiCommunicator::all_gather_v(const Tensor& input, const Tensor& output, const std::vector<int64_t>& counts) {
  detail::check_same_dtype(*this, "all_gather", input, output);
  detail::check_counts(*this, "all_gather", counts, output.numel(), "counts");
  TESSERA_CHECK(input.numel() == counts[rank_], "all_gather on group '", name_, "': input ", input.describe(),
                " must hold counts[", rank_, "] = ", counts[rank_], " elements");
  size_t esize = dtype_size(input.dtype());
  std::vector<int64_t> displs64 = detail::displacements(counts);
  bool in_place = input.data() == bytes(output) + displs64[rank_] * esize;
  std::vector<int> mpi_counts = as_mpi_counts(counts, name_, "all_gather");
  std::vector<int> displs = as_mpi_counts(displs64, name_, "all_gather");
  MPI_Datatype type = detail::mpi_datatype(input.dtype());
  std::vector<MPI_Request> req(1);
  TESSERA_MPI_CHECK(MPI_Iallgatherv(in_place ? MPI_IN_PLACE : input.data(), mpi_counts[rank_], type, output.data(),
                                    mpi_counts.data(), displs.data(), type, comm_, &req[0]));
  wait(req, "all_gather");
}

void MpiCommunicator::broadcast(const Tensor& inout, int root) {
  detail::check_comm_dtype(*this, "broadcast", inout);
  check_peer(root, "broadcast");
  std::vector<MPI_Request> req(1);
  TESSERA_MPI_CHECK(MPI_Ibcast(inout.data(), as_mpi_count(inout.numel(), name_, "broadcast"),
                               detail::mpi_datatype(inout.dtype()), root, comm_, &req[0]));
  wait(req, "broadcast");
}

void MpiCommunicator::send(const Tensor& tensor, int peer) { batched_p2p({P2POp::send(tensor, peer)}); }
void MpiCommunicator::recv(const Tensor& tensor, int peer) { batched_p2p({P2POp::recv(tensor, peer)}); }

void MpiCommunicator::batched_p2p(const std::vector<P2POp>& ops) {
  std::vector<MPI_Request> req(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    const P2POp& p = ops[i];
    const char* what = p.kind == P2POp::Kind::send ? "send" : "recv";
    detail::check_comm_dtype(*this, what, p.tensor);
    check_peer(p.peer, what);
    int n = as_mpi_count(p.tensor.numel(), name_, what);
    MPI_Datatype type = detail::mpi_datatype(p.tensor.dtype());
    if (p.kind == P2POp::Kind::send)
      TESSERA_MPI_CHECK(MPI_Isend(p.tensor.data(), n, type, p.peer, 0, comm_, &req[i]));
    else
      TESSERA_MPI_CHECK(MPI_Irecv(p.tensor.data(), n, type, p.peer, 0, comm_, &req[i]));
  }
  wait(req, ops.size() == 1 ? (ops[0].kind == P2POp::Kind::send ? "send" : "recv") : "batched_p2p");
}

void MpiCommunicator::all_to_all(const Tensor& input, const Tensor& output) {
  TESSERA_CHECK(input.numel() == output.numel() && input.numel() % size() == 0, "all_to_all on group '", name_,
                "': input ", input.describe(), " and output ", output.describe(),
                " must have the same size, divisible by the group size ", size(), " (use all_to_all_v otherwise)");
  std::vector<int64_t> counts(size(), input.numel() / size());
  if (input.data() == output.data()) {
    // In place: MPI's in-place all-to-all is not reliable across implementations; stage a copy.
    std::vector<char> staged(input.nbytes());
    std::memcpy(staged.data(), input.data(), input.nbytes());
    all_to_all_v(Tensor(staged.data(), input.dtype(), input.shape(), input.device()), output, counts, counts);
    return;
  }
  all_to_all_v(input, output, counts, counts);
}

void MpiCommunicator::all_to_all_v(const Tensor& input, const Tensor& output, const std::vector<int64_t>& send_counts,
                                   const std::vector<int64_t>& recv_counts) {
  detail::check_same_dtype(*this, "all_to_all", input, output);
  detail::check_counts(*this, "all_to_all", send_counts, input.numel(), "send counts");
  detail::check_counts(*this, "all_to_all", recv_counts, output.numel(), "receive counts");
  TESSERA_CHECK(input.numel() == 0 || input.data() != output.data(), "all_to_all_v on group '", name_,
                "' is out of place only");
  std::vector<int> sc = as_mpi_counts(send_counts, name_, "all_to_all");
  std::vector<int> rc = as_mpi_counts(recv_counts, name_, "all_to_all");
  std::vector<int> sd = as_mpi_counts(detail::displacements(send_counts), name_, "all_to_all");
  std::vector<int> rd = as_mpi_counts(detail::displacements(recv_counts), name_, "all_to_all");
  MPI_Datatype type = detail::mpi_datatype(input.dtype());
  std::vector<MPI_Request> req(1);
  TESSERA_MPI_CHECK(MPI_Ialltoallv(input.data(), sc.data(), sd.data(), type, output.data(), rc.data(), rd.data(), type,
                                   comm_, &req[0]));
  wait(req, "all_to_all");
}

void MpiCommunicator::barrier() {
  std::vector<MPI_Request> req(1);
  TESSERA_MPI_CHECK(MPI_Ibarrier(comm_, &req[0]));
  wait(req, "barrier");
}

}  // namespace tessera
