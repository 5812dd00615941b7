// tessera-bench comm: for each message size (the full, unsharded buffer, as nccl-tests counts it)
// run warmup + timed iterations of one collective, report time / algbw / busbw, then check results.
#include "comm_bench.h"

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "tessera/core/buffer.h"
#include "tessera/core/error.h"
#include "tessera/core/half.h"
#include "tessera/runtime/group_communicators.h"
#include "tessera/runtime/mpi_check.h"
#include "tessera/runtime/runtime.h"
#ifdef TESSERA_HAVE_CUDA
#include "tessera/core/cuda_check.h"
#include "tessera/runtime/nccl_communicator.h"
#endif

namespace tessera::bench {

namespace {

enum class Op { all_reduce, all_gather, reduce_scatter, broadcast, all_to_all };

Op op_from_name(const std::string& name) {
  if (name == "all_reduce") return Op::all_reduce;
  if (name == "all_gather") return Op::all_gather;
  if (name == "reduce_scatter") return Op::reduce_scatter;
  if (name == "broadcast") return Op::broadcast;
  if (name == "all_to_all") return Op::all_to_all;
  TESSERA_CONFIG_FAIL("--op ", name, " is not allowed; use all_reduce, all_gather, reduce_scatter, broadcast or all_to_all");
}

// nccl-tests' bus bandwidth factors.
double bus_factor(Op op, int n) {
  switch (op) {
    case Op::all_reduce: return 2.0 * (n - 1) / n;
    case Op::all_gather:
    case Op::reduce_scatter:
    case Op::all_to_all: return double(n - 1) / n;
    case Op::broadcast: return 1.0;
  }
  return 1.0;
}

// Small integers (0..3): sums over up to 85 ranks stay exact even in bf16.
double pattern(int rank, int64_t i) { return double((rank + i) % 4); }

void store(char* host, DType d, int64_t i, double v) {
  switch (d) {
    case DType::f32: reinterpret_cast<float*>(host)[i] = float(v); break;
    case DType::bf16: reinterpret_cast<bf16*>(host)[i] = float_to_bf16(float(v)); break;
    case DType::f16: reinterpret_cast<f16*>(host)[i] = float_to_f16(float(v)); break;
    case DType::i32: reinterpret_cast<int32_t*>(host)[i] = int32_t(v); break;
    case DType::i64: reinterpret_cast<int64_t*>(host)[i] = int64_t(v); break;
    default: TESSERA_CONFIG_FAIL("--dtype ", dtype_name(d), " is not allowed; use f32, bf16, f16, i32 or i64");
  }
}

double load(const char* host, DType d, int64_t i) {
  switch (d) {
    case DType::f32: return reinterpret_cast<const float*>(host)[i];
    case DType::bf16: return bf16_to_float(reinterpret_cast<const bf16*>(host)[i]);
    case DType::f16: return f16_to_float(reinterpret_cast<const f16*>(host)[i]);
    case DType::i32: return reinterpret_cast<const int32_t*>(host)[i];
    case DType::i64: return double(reinterpret_cast<const int64_t*>(host)[i]);
    default: return 0;
  }
}

void copy(void* dst, const void* src, size_t bytes, Device device, bool to_device) {
  if (device.is_cpu()) {
    std::memcpy(dst, src, bytes);
    return;
  }
#ifdef TESSERA_HAVE_CUDA
  TESSERA_CUDA_CHECK(cudaMemcpy(dst, src, bytes, to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost));
#else
  (void)to_device;
  TESSERA_FAIL("no CUDA in this build");
#endif
}

struct Sizes {
  int64_t count;   // elements of the full buffer
  int64_t in;      // elements of this rank's input
  int64_t out;     // elements of this rank's output
};

Sizes sizes_for(Op op, int64_t bytes, size_t esize, int n) {
  int64_t count = std::max<int64_t>(1, bytes / int64_t(esize));
  if (op == Op::all_gather || op == Op::reduce_scatter || op == Op::all_to_all)
    count = std::max<int64_t>(1, count / n) * n;
  switch (op) {
    case Op::all_gather: return {count, count / n, count};
    case Op::reduce_scatter: return {count, count, count / n};
    default: return {count, count, count};
  }
}

void run_op(Communicator& comm, Op op, const Tensor& in, const Tensor& out) {
  switch (op) {
    case Op::all_reduce: comm.all_reduce(in, out, ReduceOp::sum); break;
    case Op::all_gather: comm.all_gather(in, out); break;
    case Op::reduce_scatter: comm.reduce_scatter(in, out, ReduceOp::sum); break;
    case Op::broadcast: comm.broadcast(in, 0); break;
    case Op::all_to_all: comm.all_to_all(in, out); break;
  }
}

#ifdef TESSERA_HAVE_CUDA
ncclDataType_t nccl_type(DType d) {
  switch (d) {
    case DType::f32: return ncclFloat32;
    case DType::bf16: return ncclBfloat16;
    case DType::f16: return ncclFloat16;
    case DType::i32: return ncclInt32;
    default: return ncclInt64;
  }
}

// The same operation issued straight to NCCL on the communicator's comm and stream.
void run_raw(NcclCommunicator& comm, Op op, const Tensor& in, const Tensor& out) {
  ncclDataType_t t = nccl_type(in.dtype());
  ncclComm_t c = comm.nccl_comm();
  cudaStream_t s = comm.stream();
  switch (op) {
    case Op::all_reduce: TESSERA_NCCL_CHECK(ncclAllReduce(in.data(), out.data(), in.numel(), t, ncclSum, c, s)); break;
    case Op::all_gather: TESSERA_NCCL_CHECK(ncclAllGather(in.data(), out.data(), in.numel(), t, c, s)); break;
    case Op::reduce_scatter:
      TESSERA_NCCL_CHECK(ncclReduceScatter(in.data(), out.data(), out.numel(), t, ncclSum, c, s));
      break;
    case Op::broadcast: TESSERA_NCCL_CHECK(ncclBroadcast(in.data(), in.data(), in.numel(), t, 0, c, s)); break;
    case Op::all_to_all: {
      int n = comm.size();
      int64_t block = in.numel() / n;
      size_t bb = block * dtype_size(in.dtype());
      TESSERA_NCCL_CHECK(ncclGroupStart());
      for (int r = 0; r < n; ++r) {
        TESSERA_NCCL_CHECK(ncclSend(static_cast<char*>(in.data()) + r * bb, block, t, r, c, s));
        TESSERA_NCCL_CHECK(ncclRecv(static_cast<char*>(out.data()) + r * bb, block, t, r, c, s));
      }
      TESSERA_NCCL_CHECK(ncclGroupEnd());
      break;
    }
  }
}
#endif

double max_over_ranks(double v) {
  double r = 0;
  TESSERA_MPI_CHECK(MPI_Allreduce(&v, &r, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
  return r;
}

}  // namespace

int run_comm_bench(const CommBenchOptions& o) {
  Runtime& rt = Runtime::get();
  Op op = op_from_name(o.op);
  DType dtype = dtype_from_name(o.dtype);
  {
    char probe[8];
    store(probe, dtype, 0, 0);  // rejects dtypes the communicators do not carry
  }
  CommBackend backend = comm_backend_from_name(o.backend);
  if (o.min_bytes < 1 || o.max_bytes < o.min_bytes)
    TESSERA_CONFIG_FAIL("--min-bytes ", o.min_bytes, " / --max-bytes ", o.max_bytes, ": need 1 <= min <= max");
  if (o.step_factor < 2) TESSERA_CONFIG_FAIL("--step-factor ", o.step_factor, " must be >= 2");
  if (o.iters < 1 || o.warmup < 0) TESSERA_CONFIG_FAIL("--iters must be >= 1 and --warmup >= 0");
  if (o.raw_nccl && backend != CommBackend::nccl) TESSERA_CONFIG_FAIL("--raw-nccl needs --backend nccl");

  Device device = backend == CommBackend::nccl ? rt.select_device("cuda") : Device::cpu();
  ProcessGrid grid(rt.world_size(), rt.world_rank(), {});
  CommOptions options;
  options.blocking = o.blocking;
  options.timeout_seconds = o.timeout_seconds;
  GroupCommunicators groups(grid, backend, device, options);
  Communicator& comm = groups.get(GroupKind::world);
  const int n = comm.size(), me = comm.rank();
  const size_t esize = dtype_size(dtype);

  Sizes largest = sizes_for(op, o.max_bytes, esize, n);
  Buffer in_buffer(largest.in * esize, device), out_buffer(largest.out * esize, device);
  std::vector<char> host(std::max(largest.in, largest.out) * esize);

  if (me == 0) {
    std::printf("# tessera-bench comm: %s, backend %s%s, %d ranks, dtype %s, %d iters (+%d warmup)\n", o.op.c_str(),
                o.backend.c_str(), backend == CommBackend::nccl ? (o.blocking ? " (blocking)" : " (non-blocking)") : "",
                n, o.dtype.c_str(), o.iters, o.warmup);
    std::printf("# busbw = algbw x %s\n", op == Op::all_reduce ? "2(n-1)/n" : op == Op::broadcast ? "1" : "(n-1)/n");
    std::printf("%14s %12s %12s %12s %12s %8s%s\n", "size(B)", "count", "time(us)", "algbw(GB/s)", "busbw(GB/s)",
                "errors", o.raw_nccl ? "   raw time(us)  raw busbw  tessera/raw" : "");
  }
  int total_errors = 0;
  for (int64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= o.step_factor) {
    Sizes s = sizes_for(op, bytes, esize, n);
    Tensor in = in_buffer.as_tensor(dtype, {s.in});
    Tensor out = op == Op::broadcast ? in : out_buffer.as_tensor(dtype, {s.out});
    for (int64_t i = 0; i < s.in; ++i) store(host.data(), dtype, i, pattern(me, i));
    copy(in.data(), host.data(), s.in * esize, device, true);

    auto time_loop = [&](auto&& body) {
      for (int i = 0; i < o.warmup; ++i) body();
      comm.synchronize();
      TESSERA_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
      double t0 = MPI_Wtime();
      for (int i = 0; i < o.iters; ++i) body();
      comm.synchronize();
      return max_over_ranks((MPI_Wtime() - t0) / o.iters);
    };
    double seconds = time_loop([&] { run_op(comm, op, in, out); });

    int errors = 0;
    if (o.check) {
      copy(host.data(), out.data(), s.out * esize, device, false);
      for (int64_t i = 0; i < s.out; ++i) {
        double want = 0;
        switch (op) {
          case Op::all_reduce:
            for (int r = 0; r < n; ++r) want += pattern(r, i);
            break;
          case Op::all_gather: want = pattern(int(i / s.in), i % s.in); break;
          case Op::reduce_scatter:
            for (int r = 0; r < n; ++r) want += pattern(r, me * s.out + i);
            break;
          case Op::broadcast: want = pattern(0, i); break;
          case Op::all_to_all: {
            int64_t block = s.count / n;
            want = pattern(int(i / block), me * block + i % block);
            break;
          }
        }
        if (load(host.data(), dtype, i) != want) ++errors;
      }
      int all = 0;
      TESSERA_MPI_CHECK(MPI_Allreduce(&errors, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
      errors = all;
      total_errors += errors;
    }

    double raw_seconds = 0;
#ifdef TESSERA_HAVE_CUDA
    if (o.raw_nccl) {
      auto& nccl = dynamic_cast<NcclCommunicator&>(comm);
      raw_seconds = time_loop([&] { run_raw(nccl, op, in, out); });
      TESSERA_CUDA_CHECK(cudaStreamSynchronize(nccl.stream()));
    }
#endif
    double algbw = double(s.count * esize) / seconds / 1e9;
    double busbw = algbw * bus_factor(op, n);
    if (me == 0) {
      std::printf("%14lld %12lld %12.2f %12.2f %12.2f %8d", static_cast<long long>(s.count * esize),
                  static_cast<long long>(s.count), seconds * 1e6, algbw, busbw, errors);
      if (o.raw_nccl) {
        double raw_busbw = double(s.count * esize) / raw_seconds / 1e9 * bus_factor(op, n);
        std::printf("   %12.2f %10.2f %11.3f", raw_seconds * 1e6, raw_busbw, busbw / raw_busbw);
      }
      std::printf("\n");
      std::fflush(stdout);
    }
    if (bytes > o.max_bytes / o.step_factor) break;
  }
  if (me == 0) std::printf("# %s\n", total_errors == 0 ? "all results correct" : "RESULTS WRONG");
  return total_errors == 0 ? 0 : 1;
}

}  // namespace tessera::bench
