// cuBLASLt GEMM wrapper with a plan cache (see gemm_cuda.h). Row-major C = op(A) op(B) is computed
// as the column-major C^T = op(B)^T op(A)^T, so A and B swap places in the cuBLASLt call.
// Deterministic mode (ops/deterministic_mode.h): the heuristic may pick only algorithms without a
// split-K reduction (CUBLASLT_REDUCTION_SCHEME_NONE: every dot product in one sequence), so a GEMM's
// result does not depend on how partial products are combined; the mode is part of the plan key.
// GeLU (gemm_gelu_aux, gemm_dgelu): cuBLASLt's GELU epilogues, the tanh approximation as ops::gelu;
// the pre-activation ("aux") matrix has C's layout.
// Autotuning (opt-in with TESSERA_GEMM_AUTOTUNE=1, never in deterministic mode; not yet measured on a GPU): the
// heuristic offers up to kMaxCandidates algorithms, and a plan's first call outside a graph capture
// times each on that call's operands and keeps the fastest (the heuristic's first choice is not
// always the fastest for the step's shapes, e.g. the split-K weight-gradient GEMMs).
#include "tessera/ops/cuda/gemm_cuda.h"

#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <tuple>
#include <vector>

#include "tessera/core/buffer.h"
#include "tessera/core/tensor.h"
#include "tessera/ops/cuda/cuda_context.h"
#include "tessera/core/cuda_check.h"

namespace tessera::ops::cuda {

cudaDataType_t cuda_data_type(DType t) {
  switch (t) {
    case DType::f32: return CUDA_R_32F;
    case DType::bf16: return CUDA_R_16BF;
    case DType::f16: return CUDA_R_16F;
    default: TESSERA_FAIL("cuBLAS GEMM: dtype ", dtype_name(t), " is not supported (f32, bf16, f16)");
  }
}

namespace {

uint32_t pointer_alignment(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0) alignment >>= 1;
  return alignment;
}

using PlanKey = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                           int64_t, int, int, int, uint32_t, uint32_t, uint32_t, uint32_t, bool>;

enum Epilogue : int { kNoEpilogue = 0, kBias = 1, kGeluAuxBias = 3, kGeluAux = 4, kDGelu = 5 };

cublasLtEpilogue_t cublas_epilogue(int kind) {
  switch (kind) {
    case kBias: return CUBLASLT_EPILOGUE_BIAS;
    case kGeluAuxBias: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case kGeluAux: return CUBLASLT_EPILOGUE_GELU_AUX;
    case kDGelu: return CUBLASLT_EPILOGUE_DGELU;
    default: return CUBLASLT_EPILOGUE_DEFAULT;
  }
}

bool has_bias(int kind) { return kind == kBias || kind == kGeluAuxBias; }
bool has_aux(int kind) { return kind == kGeluAuxBias || kind == kGeluAux || kind == kDGelu; }

constexpr int kMaxCandidates = 8;  // algorithms timed per plan
constexpr int kTimedLaunches = 3;  // per candidate, after one untimed launch

bool autotune_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("TESSERA_GEMM_AUTOTUNE");
    return v && std::strcmp(v, "1") == 0;
  }();
  return on;
}

struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  std::vector<cublasLtMatmulAlgo_t> candidates;  // the heuristic's, best first; > 1 only when autotuning
  bool tuned = false;
};

cublasLtMatrixLayout_t make_layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                                   int64_t stride) {
  cublasLtMatrixLayout_t layout = nullptr;
  TESSERA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout, type, rows, cols, ld));
  if (batch > 1) {
    const int32_t count = static_cast<int32_t>(batch);
    TESSERA_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    TESSERA_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                          sizeof(stride)));
  }
  return layout;
}

// Column-major problem: C[m, n] = op(A) op(B). Nothing when the heuristic finds no algorithm and
// `optional` is set (otherwise that fails).
std::optional<Plan> build_plan(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
                               int64_t ldc, int64_t batch, int64_t stride_a, int64_t stride_b, int64_t stride_c, DType ab,
                               DType c, int epilogue_kind, uint32_t align_a, uint32_t align_b, uint32_t align_c,
                               uint32_t align_bias, bool deterministic, bool optional = false) {
  CudaContext& context = CudaContext::get();
  Plan plan;
  TESSERA_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  TESSERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  TESSERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
  if (epilogue_kind != kNoEpilogue) {
    const cublasLtEpilogue_t epilogue = cublas_epilogue(epilogue_kind);
    TESSERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
  }
  if (has_bias(epilogue_kind)) {
    const cudaDataType_t bias_type = cuda_data_type(c);
    TESSERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                        sizeof(bias_type)));
  }
  if (has_aux(epilogue_kind)) {  // the pre-activation: C's dtype (the default) and leading dimension
    const int64_t aux_ld = ldc;
    TESSERA_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld)));
  }
  plan.a = make_layout(cuda_data_type(ab), trans_a ? k : m, trans_a ? m : k, lda, batch, stride_a);
  plan.b = make_layout(cuda_data_type(ab), trans_b ? n : k, trans_b ? k : n, ldb, batch, stride_b);
  plan.c = make_layout(cuda_data_type(c), m, n, ldc, batch, stride_c);

  cublasLtMatmulPreference_t preference = nullptr;
  TESSERA_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  const size_t workspace = context.workspace_bytes();
  TESSERA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                            &workspace, sizeof(workspace)));
  TESSERA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                            &align_a, sizeof(align_a)));
  TESSERA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                            &align_b, sizeof(align_b)));
  TESSERA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                            &align_c, sizeof(align_c)));
  TESSERA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                            &align_c, sizeof(align_c)));
  (void)align_bias;
  if (deterministic) {
    const uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_NONE;
    TESSERA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                              &schemes, sizeof(schemes)));
  }
  cublasLtMatmulHeuristicResult_t results[kMaxCandidates]{};
  int found = 0;
  const int requested = !deterministic && autotune_enabled() ? kMaxCandidates : 1;
  const cublasStatus_t rc = cublasLtMatmulAlgoGetHeuristic(context.lt(), plan.op, plan.a, plan.b, plan.c, plan.c,
                                                           preference, requested, results, &found);
  cublasLtMatmulPreferenceDestroy(preference);
  if ((rc != CUBLAS_STATUS_SUCCESS || found == 0) && optional) {
    cublasLtMatrixLayoutDestroy(plan.a);
    cublasLtMatrixLayoutDestroy(plan.b);
    cublasLtMatrixLayoutDestroy(plan.c);
    cublasLtMatmulDescDestroy(plan.op);
    return std::nullopt;
  }
  if (rc != CUBLAS_STATUS_SUCCESS || found == 0)
    TESSERA_FAIL("cuBLASLt found no algorithm for a ", m, "x", n, "x", k, " GEMM (", dtype_name(ab), " -> ",
                 dtype_name(c), ", batch ", batch, ", status ", static_cast<int>(rc), ")");
  plan.algo = results[0].algo;
  for (int i = 0; i < found; ++i)
    if (results[i].state == CUBLAS_STATUS_SUCCESS) plan.candidates.push_back(results[i].algo);
  return plan;
}

}  // namespace

namespace {

// The cached plan of a GEMM with this epilogue; null when `optional` and no algorithm supports it.
Plan* find_plan(const GemmDesc& d, const void* a, const void* b, const void* c, int epilogue_kind, const void* bias,
                bool optional) {
  // Column-major C^T[n, m] = op(B)^T[n, k] op(A)^T[k, m]: B is the first operand.
  const PlanKey key{d.trans_b, d.trans_a, d.n, d.m, d.k, d.ldb, d.lda, d.ldc, d.batch, d.stride_b, d.stride_a,
                    d.stride_c, static_cast<int>(d.ab_dtype), static_cast<int>(d.c_dtype), epilogue_kind,
                    pointer_alignment(b), pointer_alignment(a), pointer_alignment(c),
                    bias ? pointer_alignment(bias) : 256u, deterministic_mode()};
  static std::map<PlanKey, std::optional<Plan>> plans;
  auto it = plans.find(key);
  if (it == plans.end())
    it = plans.emplace(key, build_plan(d.trans_b, d.trans_a, d.n, d.m, d.k, d.ldb, d.lda, d.ldc, d.batch, d.stride_b,
                                       d.stride_a, d.stride_c, d.ab_dtype, d.c_dtype, epilogue_kind,
                                       std::get<15>(key), std::get<16>(key), std::get<17>(key), std::get<18>(key),
                                       std::get<19>(key), optional))
             .first;
  return it->second ? &*it->second : nullptr;
}

// One GEMM with this algorithm: d = alpha op(A) op(B) + beta c_read (+ the plan's epilogue).
cublasStatus_t launch(const Plan& plan, const cublasLtMatmulAlgo_t& algo, float alpha, const void* a, const void* b,
                      float beta, const void* c_read, void* d) {
  CudaContext& context = CudaContext::get();
  return cublasLtMatmul(context.lt(), plan.op, &alpha, b, plan.a, a, plan.b, &beta, c_read, plan.c, d, plan.c, &algo,
                        context.workspace(), context.workspace_bytes(), context.stream());
}

// Bytes of C's column-major layout (rows n, columns m, leading dimension ldc, batches stride_c apart).
size_t c_span_bytes(const GemmDesc& d) {
  const int64_t elements = (d.batch - 1) * d.stride_c + (d.m - 1) * d.ldc + d.n;
  return static_cast<size_t>(elements) * dtype_size(d.c_dtype);
}

// Times the plan's candidates on this call's operands and keeps the fastest (once per plan; not during
// a graph capture, where the stream cannot be waited for). The timed GEMMs write c, which the real
// launch then writes again, except when c is also the input beta scales (accumulation in place):
// then they write a scratch copy of C's layout (counted in the peak device memory) and leave c as it is.
// A candidate the launch refuses is skipped; the aux matrix of GELU_AUX is rewritten with the same values.
void tune(Plan& plan, const GemmDesc& d, float alpha, const void* a, const void* b, float beta, void* c,
          const void* c_in) {
  if (plan.tuned || plan.candidates.size() < 2) return;  // a single candidate (autotune off): nothing to time
  cudaStream_t s = CudaContext::get().stream();
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  TESSERA_CUDA_CHECK(cudaStreamIsCapturing(s, &capture));
  if (capture != cudaStreamCaptureStatusNone) return;
  plan.tuned = true;
  const void* c_read = c_in ? c_in : c;
  Buffer scratch;
  void* d_out = c;
  if (beta != 0.0f && c_read == c) {
    int device = 0;
    TESSERA_CUDA_CHECK(cudaGetDevice(&device));
    scratch = Buffer(c_span_bytes(d), Device::cuda(device));
    d_out = scratch.data();
  }
  cudaEvent_t start = nullptr, stop = nullptr;
  TESSERA_CUDA_CHECK(cudaEventCreate(&start));
  TESSERA_CUDA_CHECK(cudaEventCreate(&stop));
  float best = std::numeric_limits<float>::infinity();
  for (const cublasLtMatmulAlgo_t& algo : plan.candidates) {
    if (launch(plan, algo, alpha, a, b, beta, c_read, d_out) != CUBLAS_STATUS_SUCCESS) continue;
    TESSERA_CUDA_CHECK(cudaEventRecord(start, s));
    for (int i = 0; i < kTimedLaunches; ++i) TESSERA_CUBLAS_CHECK(launch(plan, algo, alpha, a, b, beta, c_read, d_out));
    TESSERA_CUDA_CHECK(cudaEventRecord(stop, s));
    TESSERA_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    TESSERA_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    if (ms < best) {
      best = ms;
      plan.algo = algo;
    }
  }
  TESSERA_CUDA_CHECK(cudaEventDestroy(start));
  TESSERA_CUDA_CHECK(cudaEventDestroy(stop));
}

void run_plan(Plan& plan, const GemmDesc& d, float alpha, const void* a, const void* b, float beta, void* c,
              const void* c_in) {
  tune(plan, d, alpha, a, b, beta, c, c_in);
  TESSERA_CUBLAS_CHECK(launch(plan, plan.algo, alpha, a, b, beta, c_in ? c_in : c, c));
}

}  // namespace

void gemm(const GemmDesc& d, float alpha, const void* a, const void* b, float beta, void* c, const void* bias,
          const void* c_in) {
  if (d.m == 0 || d.n == 0 || d.batch == 0) return;
  CudaContext& context = CudaContext::get();
  if (d.k == 0) {
    TESSERA_CHECK(c_in == nullptr || c_in == c, "gemm with k = 0 and a separate C input is not supported");
    TESSERA_CHECK(beta == 0.0f || beta == 1.0f, "gemm with k = 0 supports beta 0 or 1 only");
    TESSERA_CHECK(bias == nullptr, "gemm with k = 0 and a bias is not supported");
    if (beta == 0.0f)
      for (int64_t i = 0; i < d.batch; ++i)
        TESSERA_CUDA_CHECK(cudaMemset2DAsync(static_cast<char*>(c) + i * d.stride_c * dtype_size(d.c_dtype),
                                             d.ldc * dtype_size(d.c_dtype), 0, d.n * dtype_size(d.c_dtype), d.m,
                                             context.stream()));
    return;
  }
  // The plan's C alignment is the lesser of the output's and the separate input's (both in C's layout).
  const void* c_alignment = c_in && pointer_alignment(c_in) < pointer_alignment(c) ? c_in : c;
  Plan& plan = *find_plan(d, a, b, c_alignment, bias ? kBias : kNoEpilogue, bias, false);
  if (bias)
    TESSERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  run_plan(plan, d, alpha, a, b, beta, c, c_in);
}

namespace {

// The GEMM with an optional epilogue (bias and/or aux pointers set per call); false, with nothing
// done, when cuBLASLt has no algorithm for it. A plan the heuristic offered but the launch refuses
// (checked before any work is queued) is remembered as unsupported too.
bool run_optional_epilogue(const GemmDesc& d, float alpha, const void* a, const void* b, float beta, void* c,
                           int epilogue_kind, const void* bias, const void* aux) {
  Plan* plan = find_plan(d, a, b, c, epilogue_kind, bias, true);
  if (!plan) return false;
  static std::map<const Plan*, bool> refused;
  if (refused.count(plan)) return false;
  if (has_bias(epilogue_kind))
    TESSERA_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  if (has_aux(epilogue_kind))
    TESSERA_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
  tune(*plan, d, alpha, a, b, beta, c, nullptr);  // candidates the epilogue refuses are skipped
  const cublasStatus_t rc = launch(*plan, plan->algo, alpha, a, b, beta, c, c);
  if (rc == CUBLAS_STATUS_NOT_SUPPORTED || rc == CUBLAS_STATUS_INVALID_VALUE) {
    refused[plan] = true;
    return false;
  }
  TESSERA_CUBLAS_CHECK(rc);
  return true;
}

// cuBLASLt's aux matrix wants 16-byte alignment and a leading dimension of a multiple of 8 elements.
bool aux_usable(const GemmDesc& d, const void* aux) {
  return d.batch == 1 && d.m > 0 && d.n > 0 && d.k > 0 && d.ldc % 8 == 0 && pointer_alignment(aux) >= 16;
}

}  // namespace

bool gemm_gelu_aux(const GemmDesc& d, const void* a, const void* b, void* c, const void* bias, void* pre_activation) {
  if (!aux_usable(d, pre_activation)) return false;
  return run_optional_epilogue(d, 1.0f, a, b, 0.0f, c, bias ? kGeluAuxBias : kGeluAux, bias, pre_activation);
}

bool gemm_dgelu(const GemmDesc& d, const void* a, const void* b, void* c, const void* pre_activation) {
  if (!aux_usable(d, pre_activation)) return false;
  return run_optional_epilogue(d, 1.0f, a, b, 0.0f, c, kDGelu, nullptr, pre_activation);
}

}  // namespace tessera::ops::cuda
