// Collective correctness checks: values are small integers, exact in every dtype (bf16 included),
// so expected results are computed exactly on the host and compared element by element.
#include "collective_checks.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

#include "tessera/core/buffer.h"
#include "tessera/core/half.h"
#ifdef TESSERA_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace tessera::testing {

namespace {

const DType kDTypes[] = {DType::f32, DType::bf16, DType::f16, DType::i32, DType::i64};

// An element value in [-5, 5], different per rank and index: sums over <= 8 ranks stay exact.
double value(int rank, int64_t i, int salt = 0) { return double(((rank * 7 + i * 3 + salt * 5) % 11 + 11) % 11 - 5); }

void store(std::vector<char>& host, DType d, int64_t i, double v) {
  switch (d) {
    case DType::f32: reinterpret_cast<float*>(host.data())[i] = float(v); break;
    case DType::bf16: reinterpret_cast<bf16*>(host.data())[i] = float_to_bf16(float(v)); break;
    case DType::f16: reinterpret_cast<f16*>(host.data())[i] = float_to_f16(float(v)); break;
    case DType::i32: reinterpret_cast<int32_t*>(host.data())[i] = int32_t(v); break;
    case DType::i64: reinterpret_cast<int64_t*>(host.data())[i] = int64_t(v); break;
    default: TESSERA_FAIL("unexpected dtype");
  }
}

double load(const std::vector<char>& host, DType d, int64_t i) {
  switch (d) {
    case DType::f32: return reinterpret_cast<const float*>(host.data())[i];
    case DType::bf16: return bf16_to_float(reinterpret_cast<const bf16*>(host.data())[i]);
    case DType::f16: return f16_to_float(reinterpret_cast<const f16*>(host.data())[i]);
    case DType::i32: return reinterpret_cast<const int32_t*>(host.data())[i];
    case DType::i64: return double(reinterpret_cast<const int64_t*>(host.data())[i]);
    default: TESSERA_FAIL("unexpected dtype");
  }
}

// A tensor on the test's device with host staging.
struct TestTensor {
  TestTensor(DType d, int64_t n, Device device) : dtype(d), numel(n), buffer(std::max<int64_t>(n, 1) * dtype_size(d), device) {}
  Tensor tensor() const { return buffer.as_tensor(dtype, {numel}); }
  Tensor slice(int64_t begin, int64_t count) const {
    return Tensor(static_cast<char*>(buffer.data()) + begin * dtype_size(dtype), dtype, {count}, buffer.device());
  }
  void upload(const std::function<double(int64_t)>& f) {
    std::vector<char> host(buffer.size());
    for (int64_t i = 0; i < numel; ++i) store(host, dtype, i, f(i));
    copy(buffer.data(), host.data(), numel * dtype_size(dtype), true);
  }
  std::vector<double> download() const {
    std::vector<char> host(buffer.size());
    copy(host.data(), buffer.data(), numel * dtype_size(dtype), false);
    std::vector<double> out(numel);
    for (int64_t i = 0; i < numel; ++i) out[i] = load(host, dtype, i);
    return out;
  }
  void copy(void* dst, const void* src, size_t bytes, bool to_device) const {
    if (buffer.device().is_cpu()) {
      std::memcpy(dst, src, bytes);
      return;
    }
#ifdef TESSERA_HAVE_CUDA
    cudaError_t rc = cudaMemcpy(dst, src, bytes, to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost);
    TESSERA_CHECK(rc == cudaSuccess, "cudaMemcpy: ", cudaGetErrorString(rc));
#else
    (void)to_device;
    TESSERA_FAIL("device copy without CUDA");
#endif
  }
  DType dtype;
  int64_t numel;
  Buffer buffer;
};

class Checker {
 public:
  Checker(Communicator& comm, Device device) : comm_(comm), device_(device), me_(comm.rank()), n_(comm.size()) {}

  int failures() const { return failures_; }

  // Compares `got` to `want` on [begin, end); names the check in the failure message.
  void expect(const std::string& what, const std::vector<double>& got, const std::function<double(int64_t)>& want,
              int64_t begin = 0, int64_t end = -1) {
    ++checks_;
    if (end < 0) end = static_cast<int64_t>(got.size());
    for (int64_t i = begin; i < end; ++i) {
      if (got[i] != want(i)) {
        std::fprintf(stderr, "[rank %d of group '%s'] FAIL %s: element %lld = %g, expected %g\n", me_,
                     comm_.name().c_str(), what.c_str(), static_cast<long long>(i), got[i], want(i));
        ++failures_;
        return;
      }
    }
  }

  void run_all() {
    for (DType d : kDTypes) {
      for (bool in_place : {false, true}) {
        std::string tag = std::string(dtype_name(d)) + (in_place ? " in place" : " out of place");
        all_reduce(d, in_place, tag);
        reduce_scatter(d, in_place, tag);
        reduce_scatter_v(d, in_place, tag);
        all_gather(d, in_place, tag);
        all_gather_v(d, in_place, tag);
        all_to_all(d, in_place, tag);
      }
      std::string tag = std::string(dtype_name(d));
      broadcast(d, tag);
      p2p(d, tag);
      all_to_all_v(d, tag);
    }
    comm_.barrier();
    ++checks_;
  }

  int checks() const { return checks_; }

 private:
  static double reduce(ReduceOp op, const std::function<double(int)>& per_rank, int ranks) {
    double r = per_rank(0);
    for (int k = 1; k < ranks; ++k) {
      double v = per_rank(k);
      r = op == ReduceOp::sum || op == ReduceOp::avg ? r + v : op == ReduceOp::max ? std::max(r, v) : std::min(r, v);
    }
    return op == ReduceOp::avg ? r / ranks : r;
  }

  void all_reduce(DType d, bool in_place, const std::string& tag) {
    const int64_t count = 37;  // not a multiple of any group size > 1
    std::vector<ReduceOp> ops{ReduceOp::sum, ReduceOp::max, ReduceOp::min};
    if (comm_.backend() == CommBackend::nccl && dtype_is_floating(d)) ops.push_back(ReduceOp::avg);  // NCCL only
    for (ReduceOp op : ops) {
      TestTensor in(d, count, device_), out(d, count, device_);
      in.upload([&](int64_t i) { return value(me_, i); });
      comm_.all_reduce(in.tensor(), in_place ? in.tensor() : out.tensor(), op);
      comm_.synchronize();
      expect("all_reduce " + reduce_op_name(op) + " " + tag, (in_place ? in : out).download(),
             [&](int64_t i) { return reduce(op, [&](int r) { return value(r, i); }, n_); });
      if (!in_place) expect("all_reduce input untouched " + tag, in.download(), [&](int64_t i) { return value(me_, i); });
    }
  }

  void reduce_scatter(DType d, bool in_place, const std::string& tag) {
    const int64_t shard = 5;
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::max}) {
      TestTensor in(d, shard * n_, device_), out(d, shard, device_);
      in.upload([&](int64_t i) { return value(me_, i, 1); });
      Tensor output = in_place ? in.slice(me_ * shard, shard) : out.tensor();
      comm_.reduce_scatter(in.tensor(), output, op);
      comm_.synchronize();
      std::vector<double> got = in_place ? in.download() : out.download();
      int64_t base = in_place ? me_ * shard : 0;
      expect("reduce_scatter " + reduce_op_name(op) + " " + tag, got,
             [&](int64_t i) { return reduce(op, [&](int r) { return value(r, me_ * shard + (i - base), 1); }, n_); },
             base, base + shard);
    }
  }

  // Uneven shards: rank r owns r + 1 elements, so the total (n(n+1)/2) is rarely divisible by n.
  std::vector<int64_t> uneven_counts() const {
    std::vector<int64_t> c(n_);
    for (int r = 0; r < n_; ++r) c[r] = r + 1 + (r % 2);
    return c;
  }

  void reduce_scatter_v(DType d, bool in_place, const std::string& tag) {
    std::vector<int64_t> counts = uneven_counts();
    int64_t total = 0, offset = 0;
    for (int r = 0; r < n_; ++r) {
      if (r == me_) offset = total;
      total += counts[r];
    }
    TestTensor in(d, total, device_), out(d, counts[me_], device_);
    in.upload([&](int64_t i) { return value(me_, i, 2); });
    Tensor output = in_place ? in.slice(offset, counts[me_]) : out.tensor();
    comm_.reduce_scatter_v(in.tensor(), output, counts, ReduceOp::sum);
    comm_.synchronize();
    int64_t base = in_place ? offset : 0;
    expect("reduce_scatter_v sum " + tag, in_place ? in.download() : out.download(),
           [&](int64_t i) { return reduce(ReduceOp::sum, [&](int r) { return value(r, offset + (i - base), 2); }, n_); },
           base, base + counts[me_]);
  }

  void all_gather(DType d, bool in_place, const std::string& tag) {
    const int64_t shard = 3;
    TestTensor in(d, shard, device_), out(d, shard * n_, device_);
    Tensor input = in_place ? out.slice(me_ * shard, shard) : in.tensor();
    if (in_place) out.upload([&](int64_t i) { return i / shard == me_ ? value(me_, i % shard, 3) : -99; });
    else in.upload([&](int64_t i) { return value(me_, i, 3); });
    comm_.all_gather(input, out.tensor());
    comm_.synchronize();
    expect("all_gather " + tag, out.download(), [&](int64_t i) { return value(int(i / shard), i % shard, 3); });
  }

  void all_gather_v(DType d, bool in_place, const std::string& tag) {
    std::vector<int64_t> counts = uneven_counts();
    std::vector<int64_t> owner, local;
    int64_t offset = 0;
    for (int r = 0; r < n_; ++r) {
      if (r == me_) offset = static_cast<int64_t>(owner.size());
      for (int64_t k = 0; k < counts[r]; ++k) owner.push_back(r), local.push_back(k);
    }
    int64_t total = static_cast<int64_t>(owner.size());
    TestTensor in(d, counts[me_], device_), out(d, total, device_);
    Tensor input = in_place ? out.slice(offset, counts[me_]) : in.tensor();
    if (in_place) out.upload([&](int64_t i) { return owner[i] == me_ ? value(me_, local[i], 4) : -99; });
    else in.upload([&](int64_t i) { return value(me_, i, 4); });
    comm_.all_gather_v(input, out.tensor(), counts);
    comm_.synchronize();
    expect("all_gather_v " + tag, out.download(), [&](int64_t i) { return value(int(owner[i]), local[i], 4); });
  }

  void broadcast(DType d, const std::string& tag) {
    const int64_t count = 13;
    int root = n_ - 1;
    TestTensor t(d, count, device_);
    t.upload([&](int64_t i) { return value(me_, i, 5); });
    comm_.broadcast(t.tensor(), root);
    comm_.synchronize();
    expect("broadcast from " + std::to_string(root) + " " + tag, t.download(),
           [&](int64_t i) { return value(root, i, 5); });
  }

  void p2p(DType d, const std::string& tag) {
    // Batched ring exchange: send to next, receive from previous, posted together.
    const int64_t count = 11;
    int next = (me_ + 1) % n_, prev = (me_ - 1 + n_) % n_;
    TestTensor out(d, count, device_), in(d, count, device_);
    out.upload([&](int64_t i) { return value(me_, i, 6); });
    comm_.batched_p2p({P2POp::send(out.tensor(), next), P2POp::recv(in.tensor(), prev)});
    comm_.synchronize();
    expect("batched_p2p ring " + tag, in.download(), [&](int64_t i) { return value(prev, i, 6); });
    if (n_ < 2) return;
    // Plain send / recv: even ranks send to the odd rank after them.
    TestTensor msg(d, count, device_);
    msg.upload([&](int64_t i) { return me_ % 2 == 0 ? value(me_, i, 7) : -99; });
    if (me_ % 2 == 0 && me_ + 1 < n_) comm_.send(msg.tensor(), me_ + 1);
    if (me_ % 2 == 1) {
      comm_.recv(msg.tensor(), me_ - 1);
      comm_.synchronize();
      expect("send/recv " + tag, msg.download(), [&](int64_t i) { return value(me_ - 1, i, 7); });
    }
    comm_.synchronize();
  }

  void all_to_all(DType d, bool in_place, const std::string& tag) {
    const int64_t block = 4;
    TestTensor in(d, block * n_, device_), out(d, block * n_, device_);
    // Block r of my input goes to rank r: encode (source, destination, k).
    in.upload([&](int64_t i) { return value(me_, (i / block) * 13 + i % block, 8); });
    comm_.all_to_all(in.tensor(), in_place ? in.tensor() : out.tensor());
    comm_.synchronize();
    expect("all_to_all " + tag, in_place ? in.download() : out.download(),
           [&](int64_t i) { return value(int(i / block), me_ * 13 + i % block, 8); });
  }

  static int64_t split(int src, int dst) { return (src + 2 * dst) % 3 + (src == dst ? 1 : 0); }

  void all_to_all_v(DType d, const std::string& tag) {
    std::vector<int64_t> send_counts(n_), recv_counts(n_);
    for (int r = 0; r < n_; ++r) send_counts[r] = split(me_, r), recv_counts[r] = split(r, me_);
    int64_t send_total = 0, recv_total = 0;
    for (int r = 0; r < n_; ++r) send_total += send_counts[r], recv_total += recv_counts[r];
    TestTensor in(d, send_total, device_), out(d, recv_total, device_);
    std::vector<int> dst_of;
    std::vector<int64_t> k_of;
    for (int r = 0; r < n_; ++r)
      for (int64_t k = 0; k < send_counts[r]; ++k) dst_of.push_back(r), k_of.push_back(k);
    in.upload([&](int64_t i) { return value(me_, dst_of[i] * 13 + k_of[i], 9); });
    comm_.all_to_all_v(in.tensor(), out.tensor(), send_counts, recv_counts);
    comm_.synchronize();
    std::vector<int> src_of;
    std::vector<int64_t> rk_of;
    for (int r = 0; r < n_; ++r)
      for (int64_t k = 0; k < recv_counts[r]; ++k) src_of.push_back(r), rk_of.push_back(k);
    expect("all_to_all_v " + tag, out.download(), [&](int64_t i) { return value(src_of[i], me_ * 13 + rk_of[i], 9); });
  }

  Communicator& comm_;
  Device device_;
  int me_, n_;
  int failures_ = 0;
  int checks_ = 0;
};

}  // namespace

int run_collective_checks(Communicator& comm, Device device) {
  Checker checker(comm, device);
  checker.run_all();
  std::fprintf(stderr, "[rank %d of group '%s' (%s, %d ranks)] %d checks, %d failed\n", comm.rank(), comm.name().c_str(),
               comm_backend_name(comm.backend()).c_str(), comm.size(), checker.checks(), checker.failures());
  return checker.failures();
}

}  // namespace tessera::testing
