// Grouped linear forward / backward (grouped_gemm_cuda.h) on cublasGemmGroupedBatchedEx (CUDA >= 12.5).
// Row-major X [r, c] is column-major X^T with ld c, so for group g (r rows, weight W [o, i]):
//   forward  out^T [o, r]  = W^T^T . in^T     (transa T, transb N, m o, n r, k i)
//   dgrad    din^T [i, r]  = W^T . dout^T     (N, N, m i, n r, k o)
//   wgrad    dW^T [i, o]  += in^T . dout       (N, T, m i, n o, k r; C f32 main grad or in's dtype)
// The pointer arrays live in a device buffer of this file (grown after a stream sync when needed);
// m / n / k / ld / alpha / beta arrays are host arrays (host pointer mode). Where cuBLAS refuses the
// grouped wgrad with an f32 C (mixed types), the wgrad falls back to one cuBLASLt GEMM per group
// (ops::cuda::linear_backward), reported once on stderr. Bias add / bias grads: per group kernels.
#include "tessera/ops/cuda/grouped_gemm_cuda.h"

#include <cublas_v2.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "tessera/core/cuda_check.h"
#include "tessera/core/error.h"
#include "tessera/ops/cuda/cuda_context.h"
#include "tessera/ops/cuda/cuda_op_checks.h"
#include "tessera/ops/cuda/gemm_cuda.h"
#include "tessera/ops/cuda/ops_cuda.h"
#include "tessera/ops/cuda/tp_ops_cuda.h"
#include "tessera/ops/op_checks.h"

namespace tessera::ops::cuda {

namespace {

struct GroupedGemm {
  cublasHandle_t handle = nullptr;
  void** pointers = nullptr;  // device: [3][capacity]
  size_t capacity = 0;
  bool wgrad_fallback = false, reported = false;
  static GroupedGemm& get() {
    static GroupedGemm g;
    return g;
  }
  cublasHandle_t ready() {
    if (!handle) TESSERA_CUBLAS_CHECK(cublasCreate(&handle));
    TESSERA_CUBLAS_CHECK(cublasSetStream(handle, CudaContext::get().stream()));
    return handle;
  }
  // Device copies of the A, B, C pointer lists (n each).
  void* const* upload(const std::vector<const void*>& a, const std::vector<const void*>& b,
                      const std::vector<void*>& c) {
    const size_t n = a.size();
    cudaStream_t s = CudaContext::get().stream();
    if (n > capacity) {
      TESSERA_CUDA_CHECK(cudaStreamSynchronize(s));
      if (pointers) TESSERA_CUDA_CHECK(cudaFree(pointers));
      capacity = std::max<size_t>(n, 64);
      TESSERA_CUDA_CHECK(cudaMalloc(&pointers, 3 * capacity * sizeof(void*)));
    }
    std::vector<const void*> host(3 * capacity, nullptr);
    for (size_t i = 0; i < n; ++i) host[i] = a[i], host[capacity + i] = b[i], host[2 * capacity + i] = c[i];
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(pointers, host.data(), 3 * capacity * sizeof(void*), cudaMemcpyHostToDevice, s));
    // pageable source: cudaMemcpyAsync has staged it before returning, so `host` may go
    return pointers;
  }
};

struct Problem {
  cublasOperation_t ta, tb;
  int m, n, k, lda, ldb, ldc;
  const void *a, *b;
  void* c;
};

// One grouped call (one problem per group); false when cuBLAS refuses it (status not success).
bool run_grouped(const std::vector<Problem>& ps, DType ab, DType c_type, float beta, bool may_refuse) {
  if (ps.empty()) return true;
  GroupedGemm& g = GroupedGemm::get();
  const size_t n = ps.size();
  std::vector<cublasOperation_t> ta(n), tb(n);
  std::vector<int> m(n), nn(n), k(n), lda(n), ldb(n), ldc(n), size(n, 1);
  std::vector<float> alpha(n, 1.0f), betas(n, beta);
  std::vector<const void*> a(n), b(n);
  std::vector<void*> c(n);
  for (size_t i = 0; i < n; ++i) {
    const Problem& p = ps[i];
    ta[i] = p.ta, tb[i] = p.tb, m[i] = p.m, nn[i] = p.n, k[i] = p.k, lda[i] = p.lda, ldb[i] = p.ldb, ldc[i] = p.ldc;
    a[i] = p.a, b[i] = p.b, c[i] = p.c;
  }
  cublasHandle_t h = g.ready();
  void* const* dev = g.upload(a, b, c);
  const void* const* da = const_cast<const void* const*>(dev);
  const void* const* db = const_cast<const void* const*>(dev + g.capacity);
  void* const* dc = dev + 2 * g.capacity;
  const cublasStatus_t rc = cublasGemmGroupedBatchedEx(
      h, ta.data(), tb.data(), m.data(), nn.data(), k.data(), alpha.data(), da, cuda_data_type(ab), lda.data(), db,
      cuda_data_type(ab), ldb.data(), betas.data(), dc, cuda_data_type(c_type), ldc.data(), static_cast<int>(n), size.data(),
      CUBLAS_COMPUTE_32F);
  if (rc == CUBLAS_STATUS_SUCCESS) return true;
  if (may_refuse) return false;
  TESSERA_FAIL("cublasGemmGroupedBatchedEx failed: status ", static_cast<int>(rc), " (", n, " groups, ",
               dtype_name(ab), " -> ", dtype_name(c_type), ")");
}

void check_groups(const char* op, const Tensor& rows_tensor, std::span<const Tensor> weights,
                  std::span<const int64_t> rows) {
  TESSERA_CHECK(weights.size() == rows.size(), op, ": ", weights.size(), " weights for ", rows.size(), " groups");
  int64_t total = 0;
  for (int64_t r : rows) total += r;
  TESSERA_CHECK(rows_tensor.ndim() == 2 && rows_tensor.dim(0) == total, op, ": ", rows_tensor.describe(), " is not ",
                total, " rows");
}

}  // namespace

void grouped_linear_forward(const Tensor& in, std::span<const Tensor> weights, std::span<const Tensor> biases,
                            std::span<const int64_t> rows, const Tensor& out) {
  const char* op = "moe_grouped_linear_forward";
  require_storage_dtype(op, in, "in");
  check_groups(op, in, weights, rows);
  check_groups(op, out, weights, rows);
  TESSERA_CHECK(biases.empty() || biases.size() == weights.size(), op, ": ", biases.size(), " biases for ",
                weights.size(), " groups");
  const size_t es = dtype_size(in.dtype());
  std::vector<Problem> ps;
  int64_t row = 0;
  for (size_t g = 0; g < rows.size(); ++g) {
    const Tensor& w = weights[g];
    const int64_t r = rows[g], o = w.dim(0), i = w.dim(1);
    TESSERA_CHECK(w.ndim() == 2 && i == in.dim(1) && o == out.dim(1) && w.dtype() == in.dtype() &&
                      out.dtype() == in.dtype(),
                  op, ": weight ", w.describe(), " does not map ", in.describe(), " to ", out.describe());
    if (r > 0)
      ps.push_back({CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(o), static_cast<int>(r), static_cast<int>(i),
                    static_cast<int>(i), static_cast<int>(i), static_cast<int>(o), w.data(),
                    static_cast<const char*>(in.data()) + row * i * es, static_cast<char*>(out.data()) + row * o * es});
    row += r;
  }
  run_grouped(ps, in.dtype(), in.dtype(), 0.0f, false);
  if (biases.empty()) return;
  row = 0;
  for (size_t g = 0; g < rows.size(); ++g) {
    if (rows[g] > 0 && biases[g].data()) add_bias_rows(out.rows(row, row + rows[g]), biases[g]);
    row += rows[g];
  }
}

void grouped_linear_backward(const Tensor& dout, const Tensor& in, std::span<const Tensor> weights,
                             std::span<const int64_t> rows, const Tensor& din, std::span<const Tensor> dweights,
                             std::span<const Tensor> dbiases) {
  const char* op = "moe_grouped_linear_backward";
  require_storage_dtype(op, in, "in");
  check_groups(op, in, weights, rows);
  check_groups(op, dout, weights, rows);
  detail::require_same_dtype(op, in, "in", dout, "dout");
  const size_t es = dtype_size(in.dtype());
  const bool has_din = din.defined() && din.data();
  if (has_din) {
    detail::require_same_shape(op, in, "in", din, "din");
    detail::require_same_dtype(op, in, "in", din, "din");
  }
  TESSERA_CHECK(dweights.size() == weights.size(), op, ": ", dweights.size(), " weight grads for ", weights.size(),
                " groups");
  std::vector<Problem> dgrad, wgrad;
  DType wgrad_type = DType::f32;
  int64_t row = 0;
  for (size_t g = 0; g < rows.size(); ++g) {
    const Tensor& w = weights[g];
    const int64_t r = rows[g], o = w.dim(0), i = w.dim(1);
    TESSERA_CHECK(w.ndim() == 2 && i == in.dim(1) && o == dout.dim(1) && w.dtype() == in.dtype(), op, ": weight ",
                  w.describe(), " does not map ", in.describe(), " to ", dout.describe());
    detail::require_same_shape(op, w, "weight", dweights[g], "dweight");
    require_like_or_f32(op, in, "in", dweights[g], "dweight");
    TESSERA_CHECK(g == 0 || dweights[g].dtype() == wgrad_type, op, ": weight grads of mixed dtypes");
    wgrad_type = dweights[g].dtype();
    const char* in_g = static_cast<const char*>(in.data()) + row * i * es;
    const char* dout_g = static_cast<const char*>(dout.data()) + row * o * es;
    if (r > 0 && has_din)
      dgrad.push_back({CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(i), static_cast<int>(r), static_cast<int>(o),
                       static_cast<int>(i), static_cast<int>(o), static_cast<int>(i), w.data(), dout_g,
                       static_cast<char*>(din.data()) + row * i * es});
    if (r > 0)
      wgrad.push_back({CUBLAS_OP_N, CUBLAS_OP_T, static_cast<int>(i), static_cast<int>(o), static_cast<int>(r),
                       static_cast<int>(i), static_cast<int>(o), static_cast<int>(i), in_g, dout_g,
                       dweights[g].data()});
    row += r;
  }
  run_grouped(dgrad, in.dtype(), in.dtype(), 0.0f, false);
  GroupedGemm& gg = GroupedGemm::get();
  bool grouped_wgrad = !gg.wgrad_fallback && run_grouped(wgrad, in.dtype(), wgrad_type, 1.0f, true);
  if (!grouped_wgrad && !wgrad.empty()) {
    if (!gg.reported)
      std::fprintf(stderr, "[moe] cublasGemmGroupedBatchedEx refuses the %s x %s -> %s wgrad: one cuBLASLt GEMM per "
                           "expert instead\n", std::string(dtype_name(in.dtype())).c_str(),
                   std::string(dtype_name(in.dtype())).c_str(), std::string(dtype_name(wgrad_type)).c_str());
    gg.wgrad_fallback = gg.reported = true;
  }
  row = 0;
  for (size_t g = 0; g < rows.size(); ++g) {
    const int64_t r = rows[g];
    if (r > 0) {
      const Tensor dout_g = dout.rows(row, row + r), in_g = in.rows(row, row + r);
      if (!grouped_wgrad) linear_backward(dout_g, in_g, weights[g], Tensor(), dweights[g], Tensor());
      if (g < dbiases.size() && dbiases[g].data()) accumulate_bias_grad(dout_g, dbiases[g]);
    }
    row += r;
  }
}

}  // namespace tessera::ops::cuda
